package helm

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testcerts"
	"github.com/meshpilot/meshpilot/pkg/webhook/inject"
	"github.com/meshpilot/meshpilot/pkg/webhook/tags"
)

// TestChartInjectionSelectorsOnAPIServer installs the injection webhook
// configurations the chart renders, for the default revision and a canary,
// into a real API server, and lets the API server decide which Pods to send
// them: the chart's namespace and object selectors are what is tested. Only
// each webhook's address changes (a URL to the injector in this process,
// since nothing here routes to a Service), and the injectors read the
// chart's own injection ConfigMaps.
func TestChartInjectionSelectorsOnAPIServer(t *testing.T) {
	tl := newTools(t)
	env := kubetest.Start(t)
	ctx := context.Background()
	cert, caPEM := testcerts.TLS(t, "127.0.0.1")

	for _, c := range loadCases(t) {
		rev, _ := c.values["pilot"]["revision"].(string)
		if c.name != "default" && c.name != "canary" {
			continue
		}
		rendered := tl.render(t, c, "pilot", false)
		dir := t.TempDir()
		cm := injectorConfigMap(t, rendered)
		for _, key := range []string{inject.ConfigFile, inject.ValuesFile} {
			if err := os.WriteFile(filepath.Join(dir, key), []byte(cm.Data[key]), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		h, err := inject.NewHandler(inject.Options{ConfigDir: dir, Revision: rev, Kube: env.Kube})
		if err != nil {
			t.Fatalf("%s: the injector rejects the chart's ConfigMap: %v", c.name, err)
		}
		srv := httptest.NewUnstartedServer(h)
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		srv.StartTLS()
		t.Cleanup(srv.Close)

		mwc := mutatingConfigs(t, rendered)[tags.InjectorName(rev, releaseNamespace)]
		if mwc == nil {
			t.Fatalf("%s: no injector rendered", c.name)
		}
		for i := range mwc.Webhooks {
			cc := &mwc.Webhooks[i].ClientConfig
			url := srv.URL + "/inject"
			if cc.Service != nil && cc.Service.Path != nil {
				url = srv.URL + *cc.Service.Path
			}
			cc.Service, cc.URL, cc.CABundle = nil, &url, caPEM
		}
		if _, err := env.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: install the chart's injector configuration: %v", c.name, err)
		}
	}

	namespaces := map[string]map[string]string{
		"enabled":  {"istio-injection": "enabled"},
		"disabled": {"istio-injection": "disabled"},
		"canary":   {"istio.io/rev": "canary"},
		"plain":    nil,
	}
	for name, labels := range namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "inj-" + name, Labels: labels}}
		if _, err := env.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	tests := []struct {
		name      string
		namespace string
		labels    map[string]string
		// wantRevision is the revision that injected the Pod, "" for none.
		wantRevision string
	}{
		{"namespace opted in", "enabled", nil, "default"},
		{"namespace opted in, Pod opts out", "enabled", map[string]string{"sidecar.istio.io/inject": "false"}, ""},
		{"namespace opted out, Pod opts in", "disabled", map[string]string{"sidecar.istio.io/inject": "true"}, ""},
		{"namespace revision", "canary", nil, "canary"},
		{"namespace revision, Pod opts out", "canary", map[string]string{"sidecar.istio.io/inject": "false"}, ""},
		{"Pod label in a plain namespace", "plain", map[string]string{"sidecar.istio.io/inject": "true"}, "default"},
		{"Pod revision in a plain namespace", "plain", map[string]string{"istio.io/rev": "canary"}, "canary"},
		{"plain namespace, plain Pod", "plain", nil, ""},
	}
	// The API server loads new webhook configurations asynchronously: the
	// first case is retried until its Pod is injected.
	waitFor(t, 30*time.Second, "the API server to call the chart's webhooks", func() error {
		return tryInjected(ctx, env, "inj-enabled", "probe", nil)
	})
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := selectorTestPod("pod-"+string(rune('a'+i)), tc.labels)
			got, err := env.Kube.CoreV1().Pods("inj-"+tc.namespace).Create(ctx, pod, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			hasProxy := slices.ContainsFunc(got.Spec.Containers, func(c corev1.Container) bool { return c.Name == "istio-proxy" })
			revision := injectedRevision(t, got)
			switch {
			case tc.wantRevision == "" && hasProxy:
				t.Errorf("injected by revision %q; want no sidecar", revision)
			case tc.wantRevision != "" && !hasProxy:
				t.Errorf("not injected; want a sidecar from revision %q", tc.wantRevision)
			case tc.wantRevision != "" && revision != tc.wantRevision:
				t.Errorf("injected by revision %q, want %q", revision, tc.wantRevision)
			}
		})
	}
}

func selectorTestPod(name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		// Set by the ServiceAccount admission plugin in a cluster, before
		// webhooks run; envtest has none, and the sidecar's token volume
		// needs it.
		Spec: corev1.PodSpec{ServiceAccountName: "default", Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}},
	}
}

// tryInjected creates a Pod and reports an error unless it came back with
// a sidecar; the Pod is deleted either way.
func tryInjected(ctx context.Context, env *kubetest.Env, ns, name string, labels map[string]string) error {
	pods := env.Kube.CoreV1().Pods(ns)
	got, err := pods.Create(ctx, selectorTestPod(name, labels), metav1.CreateOptions{})
	if err != nil {
		return err
	}
	_ = pods.Delete(ctx, name, metav1.DeleteOptions{})
	for _, c := range got.Spec.Containers {
		if c.Name == "istio-proxy" {
			return nil
		}
	}
	return errNotInjected
}

var errNotInjected = errors.New("the Pod was created without a sidecar")

// injectedRevision is the revision in the Pod's sidecar status annotation,
// "" if it has none.
func injectedRevision(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	status, ok := pod.Annotations[inject.AnnotationStatus]
	if !ok {
		return ""
	}
	var s struct {
		Revision string `json:"revision"`
	}
	if err := json.Unmarshal([]byte(status), &s); err != nil {
		t.Fatalf("%s: %v", inject.AnnotationStatus, err)
	}
	return s.Revision
}
