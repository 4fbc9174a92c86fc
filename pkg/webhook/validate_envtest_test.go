package webhook

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	securityv1beta1 "istio.io/client-go/pkg/apis/security/v1beta1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// schemaValidPA passes the CRD's own schema (which already refuses
// wildcards, empty keys, bad ports and port-level mTLS without a selector)
// but breaks meshpilot's label rules three times, so only the webhook can
// refuse it.
const schemaValidPA = `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: bad-labels}
spec:
  selector:
    matchLabels: {"bad key": "not valid!", "a/b/c": reviews}
  mtls: {mode: STRICT}
`

func paFromYAML(t *testing.T, doc, namespace string) *securityv1.PeerAuthentication {
	t.Helper()
	var pa securityv1.PeerAuthentication
	if err := json.Unmarshal(yamlToJSON(t, doc), &pa); err != nil {
		t.Fatal(err)
	}
	pa.Namespace = namespace
	return &pa
}

// TestValidationWebhookDeniesPeerAuthenticationsThroughAPIServer registers
// the validation handler for PeerAuthentications with a real API server, as
// the charts do, and creates and updates them as kubectl would. The handler
// is served over TLS by httptest, whose certificate is the caBundle: what
// is under test is the API server's call and the handler's answer.
func TestValidationWebhookDeniesPeerAuthenticationsThroughAPIServer(t *testing.T) {
	t.Parallel()
	env := kubetest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := env.Namespace(t, "webhook-pa")

	registerValidator(ctx, t, env, ns, admissionregv1.Rule{
		APIGroups: []string{"security.istio.io"}, APIVersions: []string{"*"}, Resources: []string{"peerauthentications"},
	})

	pas := env.Istio.SecurityV1().PeerAuthentications(ns)
	var denial error
	// The API server picks the configuration up through its own informer,
	// so the first attempts may still be admitted unchecked.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, denial = pas.Create(ctx, paFromYAML(t, schemaValidPA, ns), metav1.CreateOptions{})
		if denial == nil {
			_ = pas.Delete(ctx, "bad-labels", metav1.DeleteOptions{}) // created before the webhook took effect
			return false, nil
		}
		return strings.Contains(denial.Error(), "denied the request"), nil
	})
	if err != nil {
		t.Fatalf("the invalid PeerAuthentication was never denied by the webhook; last error: %v", denial)
	}

	t.Run("invalid policy is denied with every reason", func(t *testing.T) {
		msg := denial.Error()
		t.Logf("denial: %s", msg)
		if !strings.Contains(msg, `admission webhook "`+validatorName+`" denied the request`) ||
			!strings.Contains(msg, `PeerAuthentication "`+ns+`/bad-labels" is invalid`) {
			t.Errorf("denial %q does not name the webhook and the object", msg)
		}
		// Kubernetes' label rules, as Istio applies them to selectors.
		problems := []string{
			`spec.selector.matchLabels: key "a/b/c": a valid label key must consist of alphanumeric characters`,
			`spec.selector.matchLabels: key "bad key": name part must consist of alphanumeric characters`,
			`spec.selector.matchLabels: value of "bad key": a valid label must be an empty string or consist of alphanumeric characters`,
		}
		for _, p := range problems {
			if !strings.Contains(msg, p) {
				t.Errorf("denial lacks %q: %s", p, msg)
			}
		}
		if _, err := pas.Get(ctx, "bad-labels", metav1.GetOptions{}); err == nil {
			t.Error("the denied PeerAuthentication exists")
		}
	})
	t.Run("v1beta1 invalid policy is denied", func(t *testing.T) {
		var pa securityv1beta1.PeerAuthentication
		if err := json.Unmarshal(yamlToJSON(t, schemaValidPA), &pa); err != nil {
			t.Fatal(err)
		}
		pa.Namespace, pa.Name = ns, "bad-labels-beta"
		_, err := env.Istio.SecurityV1beta1().PeerAuthentications(ns).Create(ctx, &pa, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), `spec.selector.matchLabels: value of "bad key"`) {
			t.Fatalf("err = %v, want a denial naming the bad label value", err)
		}
	})
	t.Run("namespace-wide policy is admitted and a bad update denied", func(t *testing.T) {
		good := paFromYAML(t, "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: default}\nspec: {mtls: {mode: STRICT}}\n", ns)
		created, err := pas.Create(ctx, good, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("valid PeerAuthentication rejected: %v", err)
		}
		created.Spec.Selector = paFromYAML(t, schemaValidPA, ns).Spec.Selector
		if _, err := pas.Update(ctx, created, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "spec.selector.matchLabels") {
			t.Fatalf("update = %v, want a denial about spec.selector.matchLabels", err)
		}
	})
}

// validatorName is the webhook's name in the chart's configuration.
const validatorName = "rev.validation.istio.io"

// registerValidator serves the validation handler over TLS with httptest,
// whose certificate is the caBundle, and registers it with the API server
// for rule, as the charts do, in namespace ns only, so that nothing else on
// the server depends on it.
func registerValidator(ctx context.Context, t *testing.T, env *kubetest.Env, ns string, rule admissionregv1.Rule) {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(ValidatePath, NewValidationHandler(ValidationOptions{Logger: discardLogger()}))
	srv := httptest.NewUnstartedServer(mux)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	url := srv.URL + ValidatePath
	caBundle := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	fail, none, timeout := admissionregv1.Fail, admissionregv1.SideEffectClassNone, int32(5)
	vwc := &admissionregv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "meshpilot-test-validator-" + ns},
		Webhooks: []admissionregv1.ValidatingWebhook{{
			Name:         validatorName,
			ClientConfig: admissionregv1.WebhookClientConfig{URL: &url, CABundle: caBundle},
			Rules: []admissionregv1.RuleWithOperations{{
				Operations: []admissionregv1.OperationType{admissionregv1.Create, admissionregv1.Update},
				Rule:       rule,
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          &timeout,
		}},
	}
	if _, err := env.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
