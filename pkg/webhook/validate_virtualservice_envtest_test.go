package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/meshpilot/meshpilot/internal/kubetest"
)

// schemaValidVS passes the CRD's own schema but breaks meshpilot's (and
// Istio's) VirtualService rules four times, so only the webhook can refuse
// it.
const schemaValidVS = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: bad-routes}
spec:
  hosts: ["*.example.com", shop.example.com]
  http:
  - match: [{uri: {regex: "(unclosed"}}]
    redirect: {uri: /elsewhere}
    route:
    - destination: {host: echo, subset: Not_A_Label}
`

func vsFromYAML(t *testing.T, doc, namespace string) *networkingv1.VirtualService {
	t.Helper()
	var vs networkingv1.VirtualService
	if err := json.Unmarshal(yamlToJSON(t, doc), &vs); err != nil {
		t.Fatal(err)
	}
	vs.Namespace = namespace
	return &vs
}

// TestValidationWebhookDeniesVirtualServicesThroughAPIServer registers the
// validation handler for VirtualServices with a real API server, with the
// rule the charts add, and creates and updates them as kubectl would. The
// handler is served over TLS by httptest, whose certificate is the
// caBundle: what is under test is the API server's call and the handler's
// answer.
func TestValidationWebhookDeniesVirtualServicesThroughAPIServer(t *testing.T) {
	t.Parallel()
	env := kubetest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := env.Namespace(t, "webhook-vs")

	// The rule the charts add for networking.istio.io.
	registerValidator(ctx, t, env, ns, admissionregv1.Rule{
		APIGroups: []string{"networking.istio.io"}, APIVersions: []string{"*"},
		Resources: []string{"destinationrules", "virtualservices"},
	})

	vss := env.Istio.NetworkingV1().VirtualServices(ns)
	var denial error
	// The API server picks the configuration up through its own informer,
	// so the first attempts may still be admitted unchecked.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, denial = vss.Create(ctx, vsFromYAML(t, schemaValidVS, ns), metav1.CreateOptions{})
		if denial == nil {
			_ = vss.Delete(ctx, "bad-routes", metav1.DeleteOptions{}) // created before the webhook took effect
			return false, nil
		}
		return strings.Contains(denial.Error(), "denied the request"), nil
	})
	if err != nil {
		t.Fatalf("the invalid VirtualService was never denied by the webhook; last error: %v", denial)
	}

	t.Run("invalid VirtualService is denied with every reason", func(t *testing.T) {
		msg := denial.Error()
		t.Logf("denial: %s", msg)
		if !strings.Contains(msg, `admission webhook "`+validatorName+`" denied the request`) ||
			!strings.Contains(msg, `VirtualService "`+ns+`/bad-routes" is invalid`) {
			t.Errorf("denial %q does not name the webhook and the object", msg)
		}
		problems := []string{
			`spec.hosts[1]: "shop.example.com" overlaps "*.example.com" (hosts[0])`,
			`spec.http[0]: route and redirect are mutually exclusive`,
			"spec.http[0].match[0].uri.regex: not an RE2 regular expression",
			`spec.http[0].route[0].destination.subset: "Not_A_Label" is not a DNS label`,
		}
		for _, p := range problems {
			if !strings.Contains(msg, p) {
				t.Errorf("denial lacks %q: %s", p, msg)
			}
		}
		if _, err := vss.Get(ctx, "bad-routes", metav1.GetOptions{}); err == nil {
			t.Error("the denied VirtualService exists")
		}
	})
	t.Run("v1beta1 invalid VirtualService is denied", func(t *testing.T) {
		var vs networkingv1beta1.VirtualService
		if err := json.Unmarshal(yamlToJSON(t, schemaValidVS), &vs); err != nil {
			t.Fatal(err)
		}
		vs.Namespace, vs.Name = ns, "bad-routes-beta"
		_, err := env.Istio.NetworkingV1beta1().VirtualServices(ns).Create(ctx, &vs, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "spec.http[0].route[0].destination.subset") {
			t.Fatalf("err = %v, want a denial naming the bad subset", err)
		}
	})
	t.Run("a route to subset v2 is admitted and a bad update denied", func(t *testing.T) {
		good := vsFromYAML(t, `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo}
spec:
  hosts: [echo]
  http:
  - route:
    - destination: {host: echo, subset: v2}
`, ns)
		created, err := vss.Create(ctx, good, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("valid VirtualService rejected: %v", err)
		}
		created.Spec.Http[0].Route[0].Destination.Subset = "v_2"
		if _, err := vss.Update(ctx, created, metav1.UpdateOptions{}); err == nil ||
			!strings.Contains(err.Error(), "spec.http[0].route[0].destination.subset") {
			t.Fatalf("update = %v, want a denial about spec.http[0].route[0].destination.subset", err)
		}
	})
}
