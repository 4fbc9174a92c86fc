package webhook

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshpilot/meshpilot/pkg/ca"
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
		t.Fatalf("caBundle of %s never became the mesh root: %v", name, err)
	}
}

// meshRoot stands for the mesh CA as the patcher sees it: a root (from a
// real in-memory CA) that the test replaces, announcing the change.
type meshRoot struct {
	mu      sync.Mutex
	pem     []byte
	changed chan struct{}
}

func newMeshRoot(t *testing.T) *meshRoot {
	r := &meshRoot{changed: make(chan struct{}, 1)}
	r.rotate(t)
	return r
}

func (r *meshRoot) bundle() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.pem)
}

// rotate replaces the root with a new one, as a Keeper does after an
// operator replaced the CA Secret, and returns it.
func (r *meshRoot) rotate(t *testing.T) []byte {
	t.Helper()
	a, err := ca.NewSelfSigned(ca.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.pem = a.RootPEM()
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
	return a.RootPEM()
}

// runPatcher runs a BundlePatcher of revision 1-8-1 until the test ends.
func runPatcher(t *testing.T, client kubernetes.Interface, root *meshRoot) {
	t.Helper()
	p, err := NewBundlePatcher(BundleOptions{
		Client: client, Namespace: "istio-system", Revision: "1-8-1", Logger: discardLogger(),
		Bundle: root.bundle, Changed: root.changed,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func TestBundlePatcherPatchesTheMeshRoot(t *testing.T) {
	rev := map[string]string{"istio.io/rev": "1-8-1"}
	client := fake.NewClientset(
		mutatingConfig("istio-sidecar-injector-1-8-1", rev, "rev.namespace.sidecar-injector.istio.io", "rev.object.sidecar-injector.istio.io"),
		mutatingConfig("istio-revision-tag-prod", map[string]string{"istio.io/rev": "1-8-1", "istio.io/tag": "prod"}, "rev.namespace.sidecar-injector.istio.io"),
		mutatingConfig("istio-sidecar-injector", map[string]string{"istio.io/rev": "default"}, "namespace.sidecar-injector.istio.io"),
		validatingConfig("istio-validator-1-8-1-istio-system", "rev.validation.istio.io"),
		validatingConfig("istio-validator-istio-system", "rev.validation.istio.io"),
	)
	root := newMeshRoot(t)
	runPatcher(t, client, root)
	ctx := context.Background()
	bundle := root.bundle()
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

	// A new mesh root reaches every configuration, though none of them
	// changed.
	rotated := root.rotate(t)
	for _, name := range []string{"istio-sidecar-injector-1-8-1", "istio-revision-tag-prod", "istio-revision-tag-canary"} {
		waitForBundle(ctx, t, client, true, name, rotated)
	}
	waitForBundle(ctx, t, client, false, "istio-validator-1-8-1-istio-system", rotated)
}

func TestNewBundlePatcherErrors(t *testing.T) {
	client := fake.NewClientset()
	bundle := func() []byte { return nil }
	for _, tc := range []struct {
		name string
		opts BundleOptions
		want string
	}{
		{"no client", BundleOptions{Namespace: "istio-system", Bundle: bundle}, "Client is required"},
		{"no namespace", BundleOptions{Client: client, Bundle: bundle}, "Namespace is required"},
		{"no bundle", BundleOptions{Client: client, Namespace: "istio-system"}, "Bundle is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewBundlePatcher(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// The base chart's default validator belongs to the revision its
// istio.io/rev label names: only that revision's control plane patches it.
func TestBundlePatcherPatchesTheDefaultValidatorOfItsRevision(t *testing.T) {
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
			root := newMeshRoot(t)
			runPatcher(t, client, root)
			ctx := context.Background()
			// The revision's own validator is patched either way; once it
			// is, the default validator has had its chance too.
			waitForBundle(ctx, t, client, false, "istio-validator-1-8-1-istio-system", root.bundle())
			if tc.wantPatched {
				waitForBundle(ctx, t, client, false, DefaultValidatorName, root.bundle())
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
