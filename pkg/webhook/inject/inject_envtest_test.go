package inject

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testcerts"
	"github.com/meshpilot/meshpilot/internal/xdstest"
)

// TestAPIServerInjectsThroughTheWebhook registers the default and the
// canary injectors with a real API server, as the chart does but with a URL
// to this process, and creates Pods through the API.
func TestAPIServerInjectsThroughTheWebhook(t *testing.T) {
	env := kubetest.Start(t)
	ctx := context.Background()
	cert, caPEM := testcerts.TLS(t, "127.0.0.1")

	for _, revision := range []string{"", "canary"} {
		h, err := NewHandler(Options{
			ConfigDir: writeConfigDir(t, DefaultConfig(), DefaultValues()),
			Revision:  revision,
			Kube:      env.Kube,
		})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(h)
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		cfg := injectorWebhookConfiguration(revision, srv.URL+"/inject", caPEM)
		if _, err := env.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	enabled := createNamespace(t, env.Kube, "injection-enabled", map[string]string{LabelInjection: "enabled"})
	canary := createNamespace(t, env.Kube, "rev-canary", map[string]string{LabelRevision: "canary"})
	plain := createNamespace(t, env.Kube, "plain", nil)
	waitForWebhooks(t, env.Kube, enabled)

	tests := []struct {
		name        string
		namespace   string
		labels      map[string]string
		hostNetwork bool
		// wantRevision is the revision in the status annotation; "" for a
		// Pod that must stay without a sidecar.
		wantRevision string
	}{
		{name: "ns-label", namespace: enabled, wantRevision: "default"},
		{name: "ns-label-opt-out", namespace: enabled, labels: map[string]string{LabelSidecarInject: "false"}},
		{name: "ns-label-host-network", namespace: enabled, hostNetwork: true},
		{name: "ns-revision", namespace: canary, wantRevision: "canary"},
		{name: "pod-label", namespace: plain, labels: map[string]string{LabelSidecarInject: "true"}, wantRevision: "default"},
		{name: "pod-revision", namespace: plain, labels: map[string]string{LabelRevision: "canary"}, wantRevision: "canary"},
		{name: "unlabelled", namespace: plain},
	}
	var created []json.RawMessage
	for _, tt := range tests {
		pod := appPod(tt.name, tt.labels)
		pod.Spec.HostNetwork = tt.hostNetwork
		got, err := env.Kube.CoreV1().Pods(tt.namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: create Pod: %v", tt.name, err)
		}
		status, injected := got.Annotations[AnnotationStatus]
		hasProxy := hasContainer(got.Spec.Containers, ProxyContainerName)
		if tt.wantRevision == "" {
			if injected || hasProxy {
				t.Errorf("%s: Pod was injected: %s", tt.name, status)
			}
		} else {
			var s sidecarStatus
			if err := json.Unmarshal([]byte(status), &s); err != nil || s.Revision != tt.wantRevision {
				t.Errorf("%s: status %q, want revision %q", tt.name, status, tt.wantRevision)
			}
			if !hasProxy || !hasContainer(got.Spec.InitContainers, InitContainerName) {
				t.Errorf("%s: Pod lacks istio-proxy or istio-init", tt.name)
			}
		}
		created = append(created, normalizedPod(t, got, tt.namespace))
	}
	out, err := yaml.Marshal(created)
	if err != nil {
		t.Fatal(err)
	}
	xdstest.Golden(t, filepath.Join("testdata", "envtest", "pods.out.yaml"), out)
}

// injectorWebhookConfiguration is the contract's istio-sidecar-injector[-REV]
// with a URL instead of the Service.
func injectorWebhookConfiguration(revision, url string, caPEM []byte) *admissionregistrationv1.MutatingWebhookConfiguration {
	name, revLabel := "istio-sidecar-injector", defaultRevisionName
	if revision != "" {
		name, revLabel = name+"-"+revision, revision
	}
	exists := func(key string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: key, Operator: metav1.LabelSelectorOpDoesNotExist}
	}
	in := func(key string, values ...string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: key, Operator: metav1.LabelSelectorOpIn, Values: values}
	}
	notOptedOut := metav1.LabelSelectorRequirement{Key: LabelSidecarInject, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"false"}}
	webhook := func(name string, ns, obj []metav1.LabelSelectorRequirement) admissionregistrationv1.MutatingWebhook {
		fail := admissionregistrationv1.Fail
		none := admissionregistrationv1.SideEffectClassNone
		never := admissionregistrationv1.NeverReinvocationPolicy
		timeout := int32(10)
		return admissionregistrationv1.MutatingWebhook{
			Name:                    name,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			ReinvocationPolicy:      &never,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          &timeout,
			NamespaceSelector:       &metav1.LabelSelector{MatchExpressions: ns},
			ObjectSelector:          &metav1.LabelSelector{MatchExpressions: obj},
		}
	}
	webhooks := []admissionregistrationv1.MutatingWebhook{
		webhook("rev.namespace.sidecar-injector.istio.io",
			[]metav1.LabelSelectorRequirement{in(LabelRevision, revLabel), exists(LabelInjection)},
			[]metav1.LabelSelectorRequirement{notOptedOut}),
		webhook("rev.object.sidecar-injector.istio.io",
			[]metav1.LabelSelectorRequirement{exists(LabelRevision), exists(LabelInjection)},
			[]metav1.LabelSelectorRequirement{notOptedOut, in(LabelRevision, revLabel)}),
	}
	if revision == "" {
		webhooks = append(webhooks,
			webhook("namespace.sidecar-injector.istio.io",
				[]metav1.LabelSelectorRequirement{in(LabelInjection, "enabled")},
				[]metav1.LabelSelectorRequirement{notOptedOut}),
			webhook("object.sidecar-injector.istio.io",
				[]metav1.LabelSelectorRequirement{exists(LabelInjection), exists(LabelRevision)},
				[]metav1.LabelSelectorRequirement{in(LabelSidecarInject, "true"), exists(LabelRevision)}),
		)
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "sidecar-injector", LabelRevision: revLabel}},
		Webhooks:   webhooks,
	}
}

func createNamespace(t *testing.T, kube kubernetes.Interface, prefix string, labels map[string]string) string {
	t.Helper()
	ns, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Labels: labels},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func appPod(name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		// envtest runs without the ServiceAccount admission plugin, which in
		// a cluster fills this in before webhooks run; the projected token
		// volume needs it.
		Spec: corev1.PodSpec{ServiceAccountName: "default", Containers: []corev1.Container{{
			Name:  "app",
			Image: "example.com/app:1",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		}}},
	}
}

// waitForWebhooks dry-run creates a Pod until the API server, whose
// webhook configuration cache fills asynchronously, calls the injector.
func waitForWebhooks(t *testing.T, kube kubernetes.Interface, namespace string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pod, err := kube.CoreV1().Pods(namespace).Create(context.Background(), appPod("probe", nil),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil && hasContainer(pod.Spec.Containers, ProxyContainerName) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server never called the injector (last error: %v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// normalizedPod drops what differs between runs: generated namespace
// names, UIDs, versions and timestamps.
func normalizedPod(t *testing.T, pod *corev1.Pod, namespace string) json.RawMessage {
	t.Helper()
	pod = pod.DeepCopy()
	pod.UID = ""
	pod.ResourceVersion = ""
	pod.CreationTimestamp = metav1.Time{}
	pod.ManagedFields = nil
	pod.Generation = 0
	data, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	prefix := namespace[:strings.LastIndex(namespace, "-")+1]
	data = []byte(strings.ReplaceAll(string(data), namespace, prefix+"NS"))
	return data
}
