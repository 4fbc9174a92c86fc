package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testcerts"
	"github.com/meshpilot/meshpilot/pkg/ca"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

const validationWebhookName = "rev.validation.istio.io"

func drFromYAML(t *testing.T, doc, namespace string) *networkingv1.DestinationRule {
	t.Helper()
	var dr networkingv1.DestinationRule
	if err := json.Unmarshal(yamlToJSON(t, doc), &dr); err != nil {
		t.Fatal(err)
	}
	dr.Namespace = namespace
	return &dr
}

// TestValidationWebhookThroughAPIServer runs the webhook server as the
// control plane does, against a real API server that calls /validate over
// TLS: its certificate comes from the mesh CA (a ca.Keeper over the CA
// Secrets of the control plane's namespace), and the caBundle patched into
// the configurations is the mesh root. When the operator plugs in another
// CA, the certificate and the caBundles follow without a restart.
func TestValidationWebhookThroughAPIServer(t *testing.T) {
	t.Parallel()
	env := kubetest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := env.Namespace(t, "webhook")
	controlNS := env.Namespace(t, "istio-system")
	validatorName := ValidatorConfigName("", controlNS)

	keeper := ca.NewKeeper(env.Kube, ca.Options{Namespace: controlNS, Logger: discardLogger()}, nil)
	certChanges, bundleChanges := keeper.Subscribe(), keeper.Subscribe()
	if err := keeper.Load(ctx); err != nil {
		t.Fatal(err)
	}
	certs, err := ca.NewRotatingServingCert(ca.ServingCertOptions{
		Authority: keeper, Changed: certChanges, Names: []string{"127.0.0.1"}, Listener: "webhook", Logger: discardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	meshRoot := func() []byte { return keeper.Current().RootPEM() }
	patcher, err := NewBundlePatcher(BundleOptions{
		Client: env.Kube, Namespace: controlNS, Bundle: meshRoot, Changed: bundleChanges, Logger: discardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}

	srv, err := NewServer(ServerOptions{
		Addr:     "127.0.0.1:0",
		Handlers: map[string]http.Handler{ValidatePath: NewValidationHandler(ValidationOptions{Logger: discardLogger()})},
		Certs:    certs,
		Logger:   discardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	serverCtx, stopServer := context.WithCancel(ctx)
	serverDone := make(chan error, 1)
	go func() { serverDone <- srv.Run(serverCtx) }()
	var background sync.WaitGroup
	background.Go(func() { certs.Run(ctx) })
	background.Go(func() {
		if err := patcher.Run(ctx); err != nil {
			t.Errorf("patcher: %v", err)
		}
	})
	background.Go(func() {
		if err := keeper.Watch(ctx); err != nil {
			t.Errorf("keeper: %v", err)
		}
	})
	defer func() {
		stopServer()
		cancel()
		<-serverDone
		background.Wait()
	}()

	// The webhook configurations start without a caBundle; the patcher
	// puts the mesh root in.
	api := env.Kube.AdmissionregistrationV1()
	url := "https://" + srv.Addr() + ValidatePath
	fail, none, timeout := admissionregv1.Fail, admissionregv1.SideEffectClassNone, int32(5)
	vwc := &admissionregv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: validatorName, Labels: map[string]string{"istio.io/rev": "default"}},
		Webhooks: []admissionregv1.ValidatingWebhook{{
			Name:         validationWebhookName,
			ClientConfig: admissionregv1.WebhookClientConfig{URL: &url},
			Rules: []admissionregv1.RuleWithOperations{{
				Operations: []admissionregv1.OperationType{admissionregv1.Create, admissionregv1.Update},
				Rule: admissionregv1.Rule{
					APIGroups: []string{"networking.istio.io"}, APIVersions: []string{"*"}, Resources: []string{"destinationrules"},
				},
			}},
			// Only this test's namespace, so nothing else on the server is
			// affected by the outage below.
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          &timeout,
		}},
	}
	if _, err := api.ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	injectURL := "https://" + srv.Addr() + "/inject"
	neverMatch := &metav1.LabelSelector{MatchLabels: map[string]string{"meshpilot.test/never": "match"}}
	mutating := func(name, rev string) *admissionregv1.MutatingWebhookConfiguration {
		return &admissionregv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"istio.io/rev": rev}},
			Webhooks: []admissionregv1.MutatingWebhook{{
				Name:                    "rev.object.sidecar-injector.istio.io",
				ClientConfig:            admissionregv1.WebhookClientConfig{URL: &injectURL},
				NamespaceSelector:       neverMatch,
				SideEffects:             &none,
				AdmissionReviewVersions: []string{"v1"},
			}},
		}
	}
	injector := "meshpilot-test-injector-" + controlNS
	otherRevision := "meshpilot-test-injector-other-" + controlNS
	for _, c := range []*admissionregv1.MutatingWebhookConfiguration{mutating(injector, "default"), mutating(otherRevision, "1-7-6")} {
		if _, err := api.MutatingWebhookConfigurations().Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bundle := meshRoot()
	waitForBundle(ctx, t, env.Kube, false, validatorName, bundle)
	waitForBundle(ctx, t, env.Kube, true, injector, bundle)
	for _, b := range bundlesOf(ctx, t, env.Kube, true, otherRevision) {
		if len(b) != 0 {
			t.Error("a MutatingWebhookConfiguration of another revision was patched")
		}
	}

	drs := env.Istio.NetworkingV1().DestinationRules(ns)
	broken := drFromYAML(t, brokenDR, ns)
	// waitForDenial creates the broken rule until the webhook denies it. The
	// API server notices a configuration (and its caBundle) through its own
	// informer, so the first attempts may still pass or fail TLS.
	waitForDenial := func(t *testing.T) error {
		t.Helper()
		var denial error
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			_, denial = drs.Create(ctx, broken.DeepCopy(), metav1.CreateOptions{})
			if denial == nil {
				_ = drs.Delete(ctx, broken.Name, metav1.DeleteOptions{}) // created before the webhook took effect
				return false, nil
			}
			return strings.Contains(denial.Error(), "denied the request"), nil
		})
		if err != nil {
			t.Fatalf("the invalid DestinationRule was never denied by the webhook; last error: %v", denial)
		}
		return denial
	}
	denial := waitForDenial(t)
	t.Run("served chain verifies against the published mesh root", func(t *testing.T) {
		cur, err := certs.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := verifyServing(cur.Leaf, bundle, "127.0.0.1", time.Now()); err != nil {
			t.Errorf("the webhook certificate does not verify against the caBundle (the mesh root): %v", err)
		}
	})
	t.Run("invalid rule is denied with every reason", func(t *testing.T) {
		msg := denial.Error()
		t.Logf("denial: %s", msg)
		if !strings.Contains(msg, `admission webhook "`+validationWebhookName+`" denied the request`) {
			t.Errorf("denial %q does not name the webhook", msg)
		}
		dr := drFromYAML(t, brokenDR, ns)
		problems := expectedProblems[brokenDR]
		for _, want := range []string{"duplicate subset name", "spec.host", "tunnel.protocol"} {
			if !strings.Contains(msg, want) {
				t.Errorf("denial lacks %q: %s", want, msg)
			}
		}
		for _, p := range problems {
			if !strings.Contains(msg, p) {
				t.Errorf("denial lacks %q: %s", p, msg)
			}
		}
		if _, err := drs.Get(ctx, dr.Name, metav1.GetOptions{}); err == nil {
			t.Error("the denied DestinationRule exists")
		}
	})
	t.Run("v1beta1 invalid rule is denied", func(t *testing.T) {
		var dr networkingv1beta1.DestinationRule
		if err := json.Unmarshal(yamlToJSON(t, brokenDR), &dr); err != nil {
			t.Fatal(err)
		}
		dr.Namespace, dr.Name = ns, "broken-beta"
		_, err := env.Istio.NetworkingV1beta1().DestinationRules(ns).Create(ctx, &dr, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "duplicate subset name") {
			t.Fatalf("err = %v, want a denial naming the duplicate subset", err)
		}
	})
	t.Run("valid rule is admitted and a bad update denied", func(t *testing.T) {
		good := drFromYAML(t, goodDR, ns)
		created, err := drs.Create(ctx, good, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("valid DestinationRule rejected: %v", err)
		}
		created.Spec.Host = "Not_A_Host"
		if _, err := drs.Update(ctx, created, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "spec.host") {
			t.Fatalf("update = %v, want a denial about spec.host", err)
		}
	})

	t.Run("a plugged-in CA replaces the certificate and the caBundles without a restart", func(t *testing.T) {
		before, _ := certs.GetCertificate(nil)
		certPEM, keyPEM := testcerts.SelfSigned(t, "operator root CA")
		if _, err := env.Kube.CoreV1().Secrets(controlNS).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: ca.PluggedSecretName},
			Data:       map[string][]byte{ca.CACertKey: certPEM, ca.CAKeyKey: keyPEM},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitForBundle(ctx, t, env.Kube, false, validatorName, certPEM)
		waitForBundle(ctx, t, env.Kube, true, injector, certPEM)
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			cur, _ := certs.GetCertificate(nil)
			return !cur.Leaf.Equal(before.Leaf) && verifyServing(cur.Leaf, certPEM, "127.0.0.1", time.Now()) == nil, nil
		})
		if err != nil {
			t.Fatalf("the webhook certificate was not reissued by the plugged-in CA: %v", err)
		}
		// The API server trusts the new caBundle and reaches the webhook.
		waitForDenial(t)
	})

	// Outage: the server stops. With failurePolicy Fail the API server
	// refuses DestinationRules with a clear error; with Ignore it admits
	// them unchecked.
	stopServer()
	if err := <-serverDone; err != nil {
		t.Fatalf("server Run: %v", err)
	}
	serverDone <- nil // for the deferred cleanup
	t.Run("outage with Fail gives a clear error", func(t *testing.T) {
		dr := drFromYAML(t, goodDR, ns)
		dr.Name = "during-outage"
		_, err := drs.Create(ctx, dr, metav1.CreateOptions{})
		if err == nil {
			t.Fatal("created while the webhook was down and failurePolicy is Fail")
		}
		t.Logf("outage error: %v", err)
		for _, want := range []string{`failed calling webhook "` + validationWebhookName + `"`, srv.Addr(), "connection refused"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q: %v", want, err)
			}
		}
	})
	t.Run("outage with Ignore admits", func(t *testing.T) {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := api.ValidatingWebhookConfigurations().Get(ctx, validatorName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			ignore := admissionregv1.Ignore
			cur.Webhooks[0].FailurePolicy = &ignore
			_, err = api.ValidatingWebhookConfigurations().Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		dr := drFromYAML(t, goodDR, ns)
		dr.Name = "admitted-during-outage"
		var last error
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			_, last = drs.Create(ctx, dr.DeepCopy(), metav1.CreateOptions{})
			return last == nil, nil
		})
		if err != nil {
			t.Fatalf("DestinationRule not admitted with failurePolicy Ignore: %v", errors.Join(err, last))
		}
	})
}
