package webhook

import (
	"bytes"
	"context"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

func mutatingConfig(name string, labels map[string]string, webhooks ...string) *admissionregv1.MutatingWebhookConfiguration {
	c := &admissionregv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	for _, w := range webhooks {
		c.Webhooks = append(c.Webhooks, admissionregv1.MutatingWebhook{Name: w})
	}
	return c
}

func validatingConfig(name string, webhooks ...string) *admissionregv1.ValidatingWebhookConfiguration {
	c := &admissionregv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, w := range webhooks {
		c.Webhooks = append(c.Webhooks, admissionregv1.ValidatingWebhook{Name: w})
	}
	return c
}

// bundlesOf returns the caBundle of every webhook of a configuration.
func bundlesOf(ctx context.Context, t *testing.T, client kubernetes.Interface, mutating bool, name string) [][]byte {
	t.Helper()
	api := client.AdmissionregistrationV1()
	var out [][]byte
	if mutating {
		c, err := api.MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range c.Webhooks {
			out = append(out, w.ClientConfig.CABundle)
		}
		return out
	}
	c, err := api.ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range c.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	return out
}

func waitForBundle(ctx context.Context, t *testing.T, client kubernetes.Interface, mutating bool, name string, want []byte) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return allEqual(bundlesOf(ctx, t, client, mutating, name), want), nil
	})
	if err != nil {
		t.Fatalf("caBundle of %s never became the CA: %v", name, err)
	}
}

func TestCertManagerPatchesCABundles(t *testing.T) {
	rev := map[string]string{"istio.io/rev": "1-8-1"}
	client := fake.NewClientset(
		mutatingConfig("istio-sidecar-injector-1-8-1", rev, "rev.namespace.sidecar-injector.istio.io", "rev.object.sidecar-injector.istio.io"),
		mutatingConfig("istio-revision-tag-prod", map[string]string{"istio.io/rev": "1-8-1", "istio.io/tag": "prod"}, "rev.namespace.sidecar-injector.istio.io"),
		mutatingConfig("istio-sidecar-injector", map[string]string{"istio.io/rev": "default"}, "namespace.sidecar-injector.istio.io"),
		validatingConfig("istio-validator-1-8-1-istio-system", "rev.validation.istio.io"),
		validatingConfig("istio-validator-istio-system", "rev.validation.istio.io"),
	)
	clock := newFakeClock()
	m, err := NewCertManager(CertOptions{
		Client: client, Namespace: "istio-system", Revision: "1-8-1", Now: clock.Now, Logger: discardLogger(),
		CAValidity: 90 * day, CARotateBefore: 30 * day,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	<-m.Ready()
	bundle := m.CABundle()
	waitForBundle(ctx, t, client, true, "istio-sidecar-injector-1-8-1", bundle)
	waitForBundle(ctx, t, client, true, "istio-revision-tag-prod", bundle)
	waitForBundle(ctx, t, client, false, "istio-validator-1-8-1-istio-system", bundle)
	for _, other := range []struct {
		mutating bool
		name     string
	}{{true, "istio-sidecar-injector"}, {false, "istio-validator-istio-system"}} {
		for _, b := range bundlesOf(ctx, t, client, other.mutating, other.name) {
			if len(b) != 0 {
				t.Errorf("%s belongs to another revision but was patched", other.name)
			}
		}
	}

	// A configuration created later, or reset by someone (helm upgrade),
	// is patched again.
	api := client.AdmissionregistrationV1()
	if _, err := api.MutatingWebhookConfigurations().Create(ctx,
		mutatingConfig("istio-revision-tag-canary", rev, "rev.object.sidecar-injector.istio.io"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForBundle(ctx, t, client, true, "istio-revision-tag-canary", bundle)
	reset, err := api.ValidatingWebhookConfigurations().Get(ctx, "istio-validator-1-8-1-istio-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reset.Webhooks[0].ClientConfig.CABundle = []byte("stale")
	if _, err := api.ValidatingWebhookConfigurations().Update(ctx, reset, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForBundle(ctx, t, client, false, "istio-validator-1-8-1-istio-system", bundle)

	// A CA rotation reaches every configuration.
	clock.Advance(61 * day)
	if err := m.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	rotated := m.CABundle()
	if bytes.Equal(rotated, bundle) {
		t.Fatal("the CA did not rotate")
	}
	for _, name := range []string{"istio-sidecar-injector-1-8-1", "istio-revision-tag-prod", "istio-revision-tag-canary"} {
		waitForBundle(ctx, t, client, true, name, rotated)
	}
	waitForBundle(ctx, t, client, false, "istio-validator-1-8-1-istio-system", rotated)
}

// The base chart's default validator belongs to the revision its
// istio.io/rev label names: only that revision's control plane patches it.
func TestCertManagerPatchesTheDefaultValidatorOfItsRevision(t *testing.T) {
	for _, tc := range []struct {
		label       string
		wantPatched bool
	}{
		{"1-8-1", true},
		{"default", false},
	} {
		t.Run("labelled "+tc.label, func(t *testing.T) {
			validator := validatingConfig(DefaultValidatorName, "validation.istio.io")
			validator.Labels = map[string]string{"istio.io/rev": tc.label}
			client := fake.NewClientset(validator,
				validatingConfig("istio-validator-1-8-1-istio-system", "rev.validation.istio.io"))
			m, err := NewCertManager(CertOptions{
				Client: client, Namespace: "istio-system", Revision: "1-8-1", Logger: discardLogger(),
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- m.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })
			<-m.Ready()
			// The revision's own validator is patched either way; once it
			// is, the default validator has had its chance too.
			waitForBundle(ctx, t, client, false, "istio-validator-1-8-1-istio-system", m.CABundle())
			if tc.wantPatched {
				waitForBundle(ctx, t, client, false, DefaultValidatorName, m.CABundle())
				return
			}
			for _, b := range bundlesOf(ctx, t, client, false, DefaultValidatorName) {
				if len(b) != 0 {
					t.Errorf("the default validator of revision %q was patched by 1-8-1", tc.label)
				}
			}
		})
	}
}
