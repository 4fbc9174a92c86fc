package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testcerts"
	"github.com/meshpilot/meshpilot/pkg/webhook/tags"
)

// admissionLog records which fake control plane received the admission
// request for each pod ("namespace/name").
type admissionLog struct {
	mu   sync.Mutex
	seen map[string][]string
}

func (l *admissionLog) record(server, pod string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[pod] = append(l.seen[pod], server)
}

func (l *admissionLog) servers(pod string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.seen[pod])
	slices.Sort(out)
	return out
}

// fakeInjector is a TLS server standing in for one revision's injection
// webhook: it records the pod and allows it unchanged.
type fakeInjector struct {
	name     string
	url      string
	caBundle []byte
}

func startFakeInjector(t *testing.T, name string, log *admissionLog) *fakeInjector {
	t.Helper()
	// Each fake injector has its own certificate, so a tag that copied the
	// wrong caBundle fails the TLS handshake.
	cert, caPEM := testcerts.TLS(t, "127.0.0.1", "localhost")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, fmt.Sprintf("bad AdmissionReview: %v", err), http.StatusBadRequest)
			return
		}
		var pod corev1.Pod
		if err := json.Unmarshal(review.Request.Object.Raw, &pod); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		log.record(name, review.Request.Namespace+"/"+pod.Name)
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&review)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return &fakeInjector{name: name, url: srv.URL + "/inject", caBundle: caPEM}
}

func injectionWebhook(name string, target *fakeInjector, ns, obj *metav1.LabelSelector) admissionregistrationv1.MutatingWebhook {
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	never := admissionregistrationv1.NeverReinvocationPolicy
	timeout := int32(10)
	return admissionregistrationv1.MutatingWebhook{
		Name:         name,
		ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &target.url, CABundle: target.caBundle},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
		}},
		FailurePolicy:           &fail,
		SideEffects:             &none,
		ReinvocationPolicy:      &never,
		TimeoutSeconds:          &timeout,
		AdmissionReviewVersions: []string{"v1"},
		NamespaceSelector:       ns,
		ObjectSelector:          obj,
	}
}

func exprs(reqs ...metav1.LabelSelectorRequirement) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: reqs}
}

func req(key string, op metav1.LabelSelectorOperator, values ...string) metav1.LabelSelectorRequirement {
	return metav1.LabelSelectorRequirement{Key: key, Operator: op, Values: values}
}

// revisionInjector is the configuration a revisioned control plane installs:
// it matches istio.io/rev=REV on the namespace or the pod.
func revisionInjector(rev string, target *fakeInjector) *admissionregistrationv1.MutatingWebhookConfiguration {
	optOut := req("sidecar.istio.io/inject", metav1.LabelSelectorOpNotIn, "false")
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{
			Name:   "istio-sidecar-injector-" + rev,
			Labels: map[string]string{"app": "sidecar-injector", "istio.io/rev": rev},
		},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			injectionWebhook("rev.namespace.sidecar-injector.istio.io", target,
				exprs(req("istio.io/rev", metav1.LabelSelectorOpIn, rev), req("istio-injection", metav1.LabelSelectorOpDoesNotExist)),
				exprs(optOut)),
			injectionWebhook("rev.object.sidecar-injector.istio.io", target,
				exprs(req("istio.io/rev", metav1.LabelSelectorOpDoesNotExist), req("istio-injection", metav1.LabelSelectorOpDoesNotExist)),
				exprs(optOut, req("istio.io/rev", metav1.LabelSelectorOpIn, rev))),
		},
	}
}

// defaultInjector is the non-revisioned control plane's configuration,
// selecting the legacy opt-in labels.
func defaultInjector(target *fakeInjector) *admissionregistrationv1.MutatingWebhookConfiguration {
	mwc := revisionInjector("default", target)
	mwc.Name = "istio-sidecar-injector"
	mwc.Webhooks = append(mwc.Webhooks,
		injectionWebhook("namespace.sidecar-injector.istio.io", target,
			&metav1.LabelSelector{MatchLabels: map[string]string{"istio-injection": "enabled"}},
			exprs(req("sidecar.istio.io/inject", metav1.LabelSelectorOpNotIn, "false"))),
		injectionWebhook("object.sidecar-injector.istio.io", target,
			exprs(req("istio-injection", metav1.LabelSelectorOpDoesNotExist), req("istio.io/rev", metav1.LabelSelectorOpDoesNotExist)),
			exprs(req("sidecar.istio.io/inject", metav1.LabelSelectorOpIn, "true"), req("istio.io/rev", metav1.LabelSelectorOpDoesNotExist))),
	)
	return mwc
}

func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// tagHarness runs `pilot tag ...` against a real API server holding fake
// injectors for revisions 1-7-6, 1-8-1 and the non-revisioned control plane.
type tagHarness struct {
	t          *testing.T
	env        *kubetest.Env
	kubeconfig string
	log        *admissionLog
	pods       int
}

func (h *tagHarness) pilot(args ...string) (string, error) {
	h.t.Helper()
	// A root like main's, so arguments read as a user types them.
	cmd := &cobra.Command{Use: "pilot", SilenceUsage: true, SilenceErrors: true}
	cmd.AddCommand(newTagCommand())
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append(args, "--kubeconfig", h.kubeconfig))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func (h *tagHarness) mustPilot(args ...string) string {
	h.t.Helper()
	out, err := h.pilot(args...)
	if err != nil {
		h.t.Fatalf("pilot tag %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (h *tagHarness) namespace(prefix string, labels map[string]string) string {
	h.t.Helper()
	ns, err := h.env.Kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Labels: labels},
	}, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return ns.Name
}

// createPod creates a pod in ns and returns the fake injectors that were
// asked to admit it. The webhook calls happen within the create request.
func (h *tagHarness) createPod(ns string) []string {
	h.t.Helper()
	h.pods++
	name := fmt.Sprintf("probe-%d", h.pods)
	_, err := h.env.Kube.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	return h.log.servers(ns + "/" + name)
}

// expectInjectors waits until the API server has caught up with the latest
// webhook configuration change (probe pods reach exactly want), then checks
// that one more pod reaches exactly want: once the change is seen, every
// later pod must be routed by it.
func (h *tagHarness) expectInjectors(ns string, want ...string) {
	h.t.Helper()
	slices.Sort(want)
	// The API server reads webhook configurations through its own
	// informer, which a loaded machine (the suite beside it, on 2 cores)
	// has been seen to hold back for 30 s once.
	deadline := time.Now().Add(90 * time.Second)
	var got []string
	for {
		if got = h.createPod(ns); slices.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("pods in %s reached %v, want %v", ns, got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := h.createPod(ns); !slices.Equal(got, want) {
		h.t.Fatalf("after converging, a pod in %s reached %v, want %v", ns, got, want)
	}
}

func (h *tagHarness) webhookConfig(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
	h.t.Helper()
	mwc, err := h.env.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatalf("get %s: %v", name, err)
	}
	return mwc
}

func tableRows(out string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		rows = append(rows, strings.Fields(line))
	}
	return rows
}

// TestTagCommandAgainstAPIServer moves revision tags with the pilot CLI and
// checks, through the API server's own webhook calls, which revision each
// new pod reaches.
func TestTagCommandAgainstAPIServer(t *testing.T) {
	env := kubetest.Start(t)
	h := &tagHarness{t: t, env: env, kubeconfig: writeKubeconfig(t, env.Config), log: &admissionLog{seen: map[string][]string{}}}
	ctx := context.Background()
	old := startFakeInjector(t, "1-7-6", h.log)
	next := startFakeInjector(t, "1-8-1", h.log)
	legacy := startFakeInjector(t, "default", h.log)

	mwcs := env.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations()
	for _, mwc := range []*admissionregistrationv1.MutatingWebhookConfiguration{
		revisionInjector("1-7-6", old), revisionInjector("1-8-1", next), defaultInjector(legacy),
	} {
		if _, err := mwcs.Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", mwc.Name, err)
		}
	}
	originalDefault := h.webhookConfig("istio-sidecar-injector")

	prodNS := h.namespace("prod", map[string]string{"istio.io/rev": "prod"})
	legacyNS := h.namespace("legacy", map[string]string{"istio-injection": "enabled"})
	pinnedNS := h.namespace("pinned", map[string]string{"istio.io/rev": "1-7-6"})

	// Before any tag: the injectors serve their own labels, and nothing
	// serves istio.io/rev=prod. (The default injector was created last, so
	// once its webhooks are live the others are too.)
	h.expectInjectors(legacyNS, "default")
	h.expectInjectors(pinnedNS, "1-7-6")
	h.expectInjectors(prodNS)

	t.Run("missing revision", func(t *testing.T) {
		out, err := h.pilot("tag", "set", "prod", "--revision", "9-9-9")
		if err == nil || !strings.Contains(err.Error(), `revision "9-9-9" has no injector`) {
			t.Fatalf("tag set for a missing revision: err %v, output %q", err, out)
		}
	})

	h.mustPilot("tag", "set", "prod", "--revision", "1-7-6")
	h.expectInjectors(prodNS, "1-7-6")
	tag := h.webhookConfig("istio-revision-tag-prod")
	wantLabels := map[string]string{"istio.io/tag": "prod", "istio.io/rev": "1-7-6", "app": "sidecar-injector"}
	if diff := cmp.Diff(wantLabels, tag.Labels); diff != "" {
		t.Errorf("tag labels (-want +got):\n%s", diff)
	}

	_, err := h.pilot("tag", "set", "prod", "--revision", "1-8-1")
	if err == nil || !strings.Contains(err.Error(), "--overwrite") || !strings.Contains(err.Error(), `"1-7-6"`) {
		t.Fatalf("retarget without --overwrite: %v", err)
	}
	h.expectInjectors(prodNS, "1-7-6")

	h.mustPilot("tag", "set", "prod", "--revision", "1-8-1", "--overwrite")
	h.expectInjectors(prodNS, "1-8-1")
	h.expectInjectors(pinnedNS, "1-7-6")

	// default → 1-8-1: the non-revisioned injector stays but matches nothing.
	h.mustPilot("tag", "set", "default", "--revision", "1-8-1")
	h.expectInjectors(legacyNS, "1-8-1")
	deactivated := h.webhookConfig("istio-sidecar-injector")
	if !tags.IsDeactivated(deactivated) || len(deactivated.Webhooks) != len(originalDefault.Webhooks) {
		t.Fatalf("non-revisioned injector after tag set default: annotations %v, %d webhooks", deactivated.Annotations, len(deactivated.Webhooks))
	}
	for _, wh := range deactivated.Webhooks {
		if diff := cmp.Diff(tags.NeverMatch(), wh.NamespaceSelector); diff != "" {
			t.Errorf("webhook %s namespaceSelector is not never-match:\n%s", wh.Name, diff)
		}
	}
	h.expectInjectors(prodNS, "1-8-1")

	rows := tableRows(h.mustPilot("tag", "list"))
	wantRows := [][]string{
		{"TAG", "REVISION", "NAMESPACES"},
		{"default", "1-8-1", legacyNS},
		{"prod", "1-8-1", prodNS},
	}
	if diff := cmp.Diff(wantRows, rows); diff != "" {
		t.Errorf("tag list (-want +got):\n%s", diff)
	}

	// Removing default restores the original injector exactly.
	h.mustPilot("tag", "remove", "default")
	h.expectInjectors(legacyNS, "default")
	restored := h.webhookConfig("istio-sidecar-injector")
	if diff := cmp.Diff(originalDefault.Webhooks, restored.Webhooks); diff != "" {
		t.Errorf("restored injector differs (-original +restored):\n%s", diff)
	}
	if tags.IsDeactivated(restored) {
		t.Errorf("restored injector keeps annotation %v", restored.Annotations)
	}

	// Switching default to a revision and back to the non-revisioned
	// control plane restores it too.
	h.mustPilot("tag", "set", "default", "--revision", "1-7-6")
	h.expectInjectors(legacyNS, "1-7-6")
	h.mustPilot("tag", "set", "default", "--revision", "default", "--overwrite")
	h.expectInjectors(legacyNS, "default")
	if _, err := mwcs.Get(ctx, "istio-revision-tag-default", metav1.GetOptions{}); err == nil {
		t.Error("istio-revision-tag-default survived handing default back")
	}
	if diff := cmp.Diff(originalDefault.Webhooks, h.webhookConfig("istio-sidecar-injector").Webhooks); diff != "" {
		t.Errorf("injector after handing default back differs (-original +restored):\n%s", diff)
	}

	_, err = h.pilot("tag", "remove", "prod")
	if err == nil || !strings.Contains(err.Error(), prodNS) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("remove in-use tag: %v", err)
	}
	h.expectInjectors(prodNS, "1-8-1")
	h.mustPilot("tag", "remove", "prod", "--force")
	h.expectInjectors(prodNS)
	if rows := tableRows(h.mustPilot("tag", "list")); len(rows) != 1 {
		t.Errorf("tags left after removing all: %v", rows)
	}
}
