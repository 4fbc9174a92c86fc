package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// brokenDR breaks several unrelated rules at once: duplicate subsets, a bad
// host and a bad tunnel.
const brokenDR = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: broken, namespace: shop}
spec:
  host: Bad_Host.shop
  trafficPolicy:
    tunnel: {protocol: GET, targetHost: proxy.example.com, targetPort: 70000}
  subsets:
  - name: v1
    labels: {version: v1}
  - name: v1
    labels: {version: v2}
`

const goodDR = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: shop}
spec:
  host: reviews.shop.svc.cluster.local
  subsets:
  - name: v1
    labels: {version: v1}
`

func yamlToJSON(t testing.TB, doc string) []byte {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// brokenPA breaks several PeerAuthentication rules at once: port-level
// mTLS under a selector without labels, a port out of range and an unknown
// mode.
const brokenPA = `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: broken, namespace: shop}
spec:
  selector: {matchLabels: {}}
  mtls: {mode: 9}
  portLevelMtls:
    "0": {mode: STRICT}
`

const goodPA = `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: reviews, namespace: shop}
spec:
  selector: {matchLabels: {app: reviews}}
  mtls: {mode: STRICT}
  portLevelMtls:
    "9080": {mode: PERMISSIVE}
`

// brokenVS breaks several VirtualService rules at once: an overlapping
// host, a route that both forwards and redirects, a subset that is no DNS
// label, a regex RE2 cannot compile and weights that add up to nothing.
const brokenVS = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: broken, namespace: shop}
spec:
  hosts: ["*.shop.example.com", cart.shop.example.com]
  http:
  - match: [{uri: {regex: "(unclosed"}}]
    redirect: {uri: /elsewhere}
    route:
    - destination: {host: cart, subset: V_2}
      weight: 0
    - destination: {host: cart, subset: v1}
      weight: 0
`

const goodVS = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: shop}
spec:
  hosts: [echo.shop.svc.cluster.local]
  http:
  - route:
    - destination: {host: echo.shop.svc.cluster.local, subset: v2}
`

// expectedProblems are the problems each broken manifest has, by Istio's
// validation rules, written out: the handler must report each of them (as
// its message contains), and no other.
var expectedProblems = map[string][]string{
	brokenDR: {
		`spec.host: label "Bad_Host" is not letters, digits and inner hyphens, at most 63 long`,
		`spec.trafficPolicy.tunnel.protocol: must be CONNECT or POST, got "GET"`,
		`spec.trafficPolicy.tunnel.targetPort: port number must be in 1..65535, got 70000`,
		`spec.subsets[1].name: duplicate subset name "v1"`,
	},
	brokenPA: {
		`spec.mtls.mode: unknown mode 9: must be UNSET, DISABLE, PERMISSIVE or STRICT`,
		`spec.portLevelMtls: needs a selector with at least one label: mesh-wide and namespace-wide policies cannot set port-level mTLS`,
		`spec.portLevelMtls[0]: port number must be in 1..65535, got 0`,
	},
	brokenVS: {
		`spec.hosts[1]: "cart.shop.example.com" overlaps "*.shop.example.com" (hosts[0])`,
		`spec.http[0]: route and redirect are mutually exclusive`,
		`spec.http[0].match[0].uri.regex: not an RE2 regular expression`,
		`spec.http[0].route[0].destination.subset: "V_2" is not a DNS label`,
		`spec.http[0].route: the weights of 2 destinations add up to 0`,
	},
}

type reviewSpec struct {
	group, version, kind string
	op                   admissionv1.Operation
	object               string // YAML; empty for none
	oldObject            string
}

func reviewBody(t testing.TB, s reviewSpec) []byte {
	t.Helper()
	req := &admissionv1.AdmissionRequest{
		UID:       types.UID("uid-" + strings.ToLower(string(s.op)) + "-" + s.version),
		Kind:      metav1.GroupVersionKind{Group: s.group, Version: s.version, Kind: s.kind},
		Resource:  metav1.GroupVersionResource{Group: s.group, Version: s.version, Resource: strings.ToLower(s.kind) + "s"},
		Operation: s.op,
		Namespace: "shop",
	}
	if s.object != "" {
		req.Object = runtime.RawExtension{Raw: yamlToJSON(t, s.object)}
		var meta struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(req.Object.Raw, &meta); err != nil {
			t.Fatal(err)
		}
		req.Name = meta.Metadata.Name
	}
	if s.oldObject != "" {
		req.OldObject = runtime.RawExtension{Raw: yamlToJSON(t, s.oldObject)}
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  req,
	}
	body, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func postReview(t *testing.T, h http.Handler, body []byte) (*httptest.ResponseRecorder, *admissionv1.AdmissionReview) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, ValidatePath, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		return w, nil
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		t.Fatalf("response is not an AdmissionReview: %v\n%s", err, w.Body)
	}
	return w, &out
}

func TestValidationHandlerDecisions(t *testing.T) {
	withVersion := func(doc, version string) string {
		return strings.Replace(doc, "networking.istio.io/v1\n", "networking.istio.io/"+version+"\n", 1)
	}
	generated := strings.Replace(brokenDR, "name: broken", "generateName: broken-", 1)
	cases := []struct {
		name   string
		review reviewSpec
		// wantDenied lists substrings the denial must contain; nil means
		// allowed.
		wantDenied []string
		// wantAllProblemsOf names a manifest whose every validation problem
		// must appear in the denial.
		wantAllProblemsOf string
	}{
		{
			name:   "valid v1 create",
			review: reviewSpec{group: istioNetworkingGroup, version: "v1", kind: "DestinationRule", op: admissionv1.Create, object: goodDR},
		},
		{
			name:              "invalid v1 create lists every problem",
			review:            reviewSpec{group: istioNetworkingGroup, version: "v1", kind: "DestinationRule", op: admissionv1.Create, object: brokenDR},
			wantDenied:        []string{`DestinationRule "shop/broken" is invalid`, "duplicate subset name", "spec.host", "tunnel.protocol", "tunnel.targetPort"},
			wantAllProblemsOf: brokenDR,
		},
		{
			name:              "invalid v1beta1 update",
			review:            reviewSpec{group: istioNetworkingGroup, version: "v1beta1", kind: "DestinationRule", op: admissionv1.Update, object: withVersion(brokenDR, "v1beta1"), oldObject: withVersion(goodDR, "v1beta1")},
			wantDenied:        []string{"duplicate subset name"},
			wantAllProblemsOf: brokenDR,
		},
		{
			name:              "invalid v1alpha3 create",
			review:            reviewSpec{group: istioNetworkingGroup, version: "v1alpha3", kind: "DestinationRule", op: admissionv1.Create, object: withVersion(brokenDR, "v1alpha3")},
			wantAllProblemsOf: brokenDR,
			wantDenied:        []string{"tunnel.protocol"},
		},
		{
			name:       "generateName is validated and named",
			review:     reviewSpec{group: istioNetworkingGroup, version: "v1", kind: "DestinationRule", op: admissionv1.Create, object: generated},
			wantDenied: []string{`"shop/broken-*"`, "duplicate subset name"},
		},
		{
			name:   "delete of an invalid rule is allowed",
			review: reviewSpec{group: istioNetworkingGroup, version: "v1", kind: "DestinationRule", op: admissionv1.Delete, oldObject: brokenDR},
		},
		{
			name:   "other kinds are allowed",
			review: reviewSpec{group: istioNetworkingGroup, version: "v1", kind: "Gateway", op: admissionv1.Create, object: strings.Replace(brokenDR, "DestinationRule", "Gateway", 1)},
		},
		{
			name:   "valid VirtualService v1 create",
			review: reviewSpec{group: istioNetworkingGroup, version: "v1", kind: "VirtualService", op: admissionv1.Create, object: goodVS},
		},
		{
			name:              "invalid VirtualService lists every problem",
			review:            reviewSpec{group: istioNetworkingGroup, version: "v1", kind: "VirtualService", op: admissionv1.Create, object: brokenVS},
			wantDenied:        []string{`VirtualService "shop/broken" is invalid`},
			wantAllProblemsOf: brokenVS,
		},
		{
			name:              "invalid VirtualService v1beta1 update",
			review:            reviewSpec{group: istioNetworkingGroup, version: "v1beta1", kind: "VirtualService", op: admissionv1.Update, object: withVersion(brokenVS, "v1beta1"), oldObject: withVersion(goodVS, "v1beta1")},
			wantAllProblemsOf: brokenVS,
		},
		{
			name:              "invalid VirtualService v1alpha3 create",
			review:            reviewSpec{group: istioNetworkingGroup, version: "v1alpha3", kind: "VirtualService", op: admissionv1.Create, object: withVersion(brokenVS, "v1alpha3")},
			wantAllProblemsOf: brokenVS,
		},
		{
			name: "a VirtualService's unknown fields and wrong types are denied by path",
			review: reviewSpec{group: istioNetworkingGroup, version: "v1", kind: "VirtualService", op: admissionv1.Create,
				object: strings.Replace(goodVS, "subset: v2}", "subest: v2}\n      weight: heavy", 1)},
			wantDenied: []string{`VirtualService "shop/echo" is invalid: spec.http[0].route[0].destination.subest: unknown field (did you mean subset?); ` +
				`spec.http[0].route[0].weight: want an integer, got "heavy"`},
		},
		{
			name:   "delete of an invalid VirtualService is allowed",
			review: reviewSpec{group: istioNetworkingGroup, version: "v1", kind: "VirtualService", op: admissionv1.Delete, oldObject: brokenVS},
		},
		{
			name:   "unknown versions are allowed",
			review: reviewSpec{group: istioNetworkingGroup, version: "v2", kind: "DestinationRule", op: admissionv1.Create, object: brokenDR},
		},
		{
			name:       "a spec of the wrong type is denied, naming the field",
			review:     reviewSpec{group: istioNetworkingGroup, version: "v1", kind: "DestinationRule", op: admissionv1.Create, object: strings.Replace(goodDR, "host: reviews.shop.svc.cluster.local", "host: {a: b}", 1)},
			wantDenied: []string{`DestinationRule "shop/reviews" is invalid: spec.host: want a string, got an object`},
		},
		{
			name: "unknown fields are denied, each with its path",
			review: reviewSpec{group: istioNetworkingGroup, version: "v1", kind: "DestinationRule", op: admissionv1.Create,
				object: goodDR + "  simpel: ROUND_ROBIN\n  trafficPolicy:\n    conectionPool: {tcp: {maxConnections: 1}}\nspecs: {}\n"},
			wantDenied: []string{`DestinationRule "shop/reviews" is invalid: specs: unknown field; spec.simpel: unknown field; ` +
				"spec.trafficPolicy.conectionPool: unknown field (did you mean connectionPool?)"},
		},
		{
			name: "a value of the wrong type names its field",
			review: reviewSpec{group: istioNetworkingGroup, version: "v1", kind: "DestinationRule", op: admissionv1.Create,
				object: strings.Replace(brokenDR, "  trafficPolicy:\n", "  trafficPolicy:\n    connectionPool: {tcp: {maxConnections: ten}}\n", 1)},
			wantDenied: []string{`is invalid: spec.trafficPolicy.connectionPool.tcp.maxConnections: want an integer, got "ten"`},
		},
		{
			name: "an unknown field does not hide what validation finds",
			review: reviewSpec{group: istioNetworkingGroup, version: "v1", kind: "DestinationRule", op: admissionv1.Create,
				object: brokenDR + "  simpel: x\n"},
			wantDenied: []string{"spec.simpel: unknown field; spec.host:", `duplicate subset name "v1"`},
		},
		{
			name:       "create without an object is denied",
			review:     reviewSpec{group: istioNetworkingGroup, version: "v1", kind: "DestinationRule", op: admissionv1.Create},
			wantDenied: []string{"no object"},
		},
		{
			name:   "valid PeerAuthentication v1 create",
			review: reviewSpec{group: istioSecurityGroup, version: "v1", kind: "PeerAuthentication", op: admissionv1.Create, object: goodPA},
		},
		{
			name:   "mesh-wide PeerAuthentication is allowed",
			review: reviewSpec{group: istioSecurityGroup, version: "v1", kind: "PeerAuthentication", op: admissionv1.Create, object: "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: default, namespace: istio-system}\nspec: {mtls: {mode: STRICT}}\n"},
		},
		{
			name:              "invalid PeerAuthentication lists every problem",
			review:            reviewSpec{group: istioSecurityGroup, version: "v1", kind: "PeerAuthentication", op: admissionv1.Create, object: brokenPA},
			wantDenied:        []string{`PeerAuthentication "shop/broken" is invalid`, "spec.mtls.mode: unknown mode 9", "spec.portLevelMtls: needs a selector", "spec.portLevelMtls[0]: port number"},
			wantAllProblemsOf: brokenPA,
		},
		{
			name:              "invalid PeerAuthentication v1beta1 update",
			review:            reviewSpec{group: istioSecurityGroup, version: "v1beta1", kind: "PeerAuthentication", op: admissionv1.Update, object: strings.Replace(brokenPA, "security.istio.io/v1\n", "security.istio.io/v1beta1\n", 1), oldObject: goodPA},
			wantAllProblemsOf: brokenPA,
		},
		{
			name:       "PeerAuthentication with a generateName",
			review:     reviewSpec{group: istioSecurityGroup, version: "v1", kind: "PeerAuthentication", op: admissionv1.Create, object: strings.Replace(brokenPA, "name: broken", "generateName: broken-", 1)},
			wantDenied: []string{`"shop/broken-*"`, "spec.portLevelMtls: needs a selector"},
		},
		{
			name:   "delete of an invalid PeerAuthentication is allowed",
			review: reviewSpec{group: istioSecurityGroup, version: "v1", kind: "PeerAuthentication", op: admissionv1.Delete, oldObject: brokenPA},
		},
		{
			name:       "an unknown PeerAuthentication mode is denied, quoted once",
			review:     reviewSpec{group: istioSecurityGroup, version: "v1", kind: "PeerAuthentication", op: admissionv1.Create, object: strings.Replace(goodPA, "mode: STRICT", "mode: STRICTER", 1)},
			wantDenied: []string{`spec.mtls.mode: want UNSET, DISABLE, PERMISSIVE or STRICT, got "STRICTER"`},
		},
		{
			name:   "PeerAuthentication of an unknown version is allowed",
			review: reviewSpec{group: istioSecurityGroup, version: "v1alpha1", kind: "PeerAuthentication", op: admissionv1.Create, object: brokenPA},
		},
		{
			name:   "other security kinds are allowed",
			review: reviewSpec{group: istioSecurityGroup, version: "v1", kind: "AuthorizationPolicy", op: admissionv1.Create, object: strings.Replace(brokenPA, "PeerAuthentication", "AuthorizationPolicy", 1)},
		},
		{
			name:   "a PeerAuthentication kind in another group is allowed",
			review: reviewSpec{group: istioNetworkingGroup, version: "v1", kind: "PeerAuthentication", op: admissionv1.Create, object: brokenPA},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			metrics := NewMetrics(nil)
			h := NewValidationHandler(ValidationOptions{Metrics: metrics, Logger: discardLogger()})
			w, review := postReview(t, h, reviewBody(t, tc.review))
			if review == nil {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			if review.APIVersion != "admission.k8s.io/v1" || review.Kind != "AdmissionReview" || review.Request != nil {
				t.Errorf("envelope = %+v, want an admission.k8s.io/v1 AdmissionReview with only a response", review.TypeMeta)
			}
			resp := review.Response
			if resp == nil {
				t.Fatal("no response")
			}
			if want := types.UID("uid-" + strings.ToLower(string(tc.review.op)) + "-" + tc.review.version); resp.UID != want {
				t.Errorf("uid = %q, want %q", resp.UID, want)
			}
			denied := tc.wantDenied != nil || tc.wantAllProblemsOf != ""
			if resp.Allowed == denied {
				t.Fatalf("allowed = %v, want %v (result %+v)", resp.Allowed, !denied, resp.Result)
			}
			kind, op := tc.review.kind, string(tc.review.op)
			label := kind
			if _, validated := validatedKinds[schema.GroupKind{Group: tc.review.group, Kind: kind}]; !validated {
				label = "other"
			}
			if got := testutil.ToFloat64(metrics.ValidationRequests.WithLabelValues(label, op)); got != 1 {
				t.Errorf("requests{%s,%s} = %v, want 1", kind, op, got)
			}
			wantDenials := 0.0
			if denied {
				wantDenials = 1
			}
			if got := testutil.ToFloat64(metrics.ValidationDenials.WithLabelValues(kind)); got != wantDenials {
				t.Errorf("denials{%s} = %v, want %v", kind, got, wantDenials)
			}
			if !denied {
				return
			}
			if resp.Result == nil || resp.Result.Code != http.StatusUnprocessableEntity || resp.Result.Reason != metav1.StatusReasonInvalid {
				t.Fatalf("result = %+v, want a 422 Invalid status", resp.Result)
			}
			msg := resp.Result.Message
			for _, want := range tc.wantDenied {
				if !strings.Contains(msg, want) {
					t.Errorf("denial %q lacks %q", msg, want)
				}
			}
			if tc.wantAllProblemsOf != "" {
				problems := expectedProblems[tc.wantAllProblemsOf]
				for _, p := range problems {
					if !strings.Contains(msg, p) {
						t.Errorf("denial %q lacks problem %q", msg, p)
					}
				}
				if got := strings.Count(msg, "; ") + 1; got != len(problems) {
					t.Errorf("denial lists %d problems, want %d: %q", got, len(problems), msg)
				}
			}
		})
	}
}

// TestValidationMetricLabelsAreBounded: the kind and operation of a review
// come from its body, and any pod can POST one to the webhook port. Labels
// taken from them unchecked would grow a series per made-up value, in the
// control plane's memory and in every scrape; only the kinds the webhook
// validates and Kubernetes' operations get a label of their own.
func TestValidationMetricLabelsAreBounded(t *testing.T) {
	cases := []struct {
		name             string
		review           reviewSpec
		wantKind, wantOp string
	}{
		{"validated kind", reviewSpec{group: istioNetworkingGroup, version: "v1", kind: "DestinationRule", op: admissionv1.Create, object: goodDR},
			"DestinationRule", "CREATE"},
		{"validated kind, unknown version", reviewSpec{group: istioSecurityGroup, version: "v9", kind: "PeerAuthentication", op: admissionv1.Update},
			"PeerAuthentication", "UPDATE"},
		{"made-up kind", reviewSpec{group: istioNetworkingGroup, version: "v1", kind: "Kind-c0ffee-1", op: admissionv1.Create},
			"other", "CREATE"},
		{"validated kind name in another group", reviewSpec{group: "example.com", version: "v1", kind: "DestinationRule", op: admissionv1.Delete},
			"other", "DELETE"},
		{"made-up operation", reviewSpec{group: istioNetworkingGroup, version: "v1", kind: "VirtualService", op: "OP-c0ffee-2"},
			"VirtualService", "other"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			metrics := NewMetrics(nil)
			h := NewValidationHandler(ValidationOptions{Metrics: metrics, Logger: discardLogger()})
			r := httptest.NewRequest(http.MethodPost, ValidatePath, bytes.NewReader(reviewBody(t, tc.review)))
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				t.Fatalf("status = %d: %s", w.Code, w.Body)
			}
			if n := testutil.CollectAndCount(metrics.ValidationRequests); n != 1 {
				t.Fatalf("%d series, want 1", n)
			}
			if got := testutil.ToFloat64(metrics.ValidationRequests.WithLabelValues(tc.wantKind, tc.wantOp)); got != 1 {
				t.Errorf("requests{%s,%s} = %v, want 1", tc.wantKind, tc.wantOp, got)
			}
		})
	}
}

func TestValidationHandlerRejectsMalformedRequests(t *testing.T) {
	valid := reviewBody(t, reviewSpec{group: istioNetworkingGroup, version: "v1", kind: "DestinationRule", op: admissionv1.Create, object: goodDR})
	cases := []struct {
		name        string
		method      string
		contentType string
		body        string
		wantCode    int
		wantMsg     string
	}{
		{name: "not json", body: "{nope", wantCode: http.StatusBadRequest, wantMsg: "decoding the AdmissionReview"},
		{name: "empty body", body: "", wantCode: http.StatusBadRequest, wantMsg: "empty request body"},
		{name: "v1beta1 review", body: strings.Replace(string(valid), "admission.k8s.io/v1", "admission.k8s.io/v1beta1", 1),
			wantCode: http.StatusBadRequest, wantMsg: `expected apiVersion admission.k8s.io/v1 and kind AdmissionReview, got apiVersion "admission.k8s.io/v1beta1"`},
		{name: "not a review", body: `{"apiVersion":"v1","kind":"Pod"}`, wantCode: http.StatusBadRequest, wantMsg: `kind "Pod"`},
		{name: "no request", body: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, wantCode: http.StatusBadRequest, wantMsg: "has no request"},
		{name: "no uid", body: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":"CREATE"}}`,
			wantCode: http.StatusBadRequest, wantMsg: "has no uid"},
		{name: "GET", method: http.MethodGet, wantCode: http.StatusMethodNotAllowed, wantMsg: "must be POSTed"},
		{name: "yaml content type", contentType: "application/yaml", body: string(valid), wantCode: http.StatusUnsupportedMediaType, wantMsg: "not application/json"},
		{name: "too large", body: `{"apiVersion":"` + strings.Repeat("x", maxReviewBytes) + `"}`, wantCode: http.StatusRequestEntityTooLarge, wantMsg: "larger than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			metrics := NewMetrics(nil)
			h := NewValidationHandler(ValidationOptions{Metrics: metrics, Logger: discardLogger()})
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			r := httptest.NewRequest(method, ValidatePath, strings.NewReader(tc.body))
			ct := tc.contentType
			if ct == "" {
				ct = "application/json; charset=utf-8"
			}
			r.Header.Set("Content-Type", ct)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.wantCode {
				t.Fatalf("status = %d, want %d: %s", w.Code, tc.wantCode, w.Body)
			}
			if !strings.Contains(w.Body.String(), tc.wantMsg) {
				t.Errorf("body %q lacks %q", w.Body, tc.wantMsg)
			}
			if got := testutil.ToFloat64(metrics.BadRequests.WithLabelValues(ValidatePath)); got != 1 {
				t.Errorf("bad requests = %v, want 1", got)
			}
		})
	}
}

// BenchmarkValidationHandler reviews one object with several problems
// of each kind the webhook validates.
func BenchmarkValidationHandler(b *testing.B) {
	for _, tc := range []struct {
		kind   string
		object string
	}{
		{"DestinationRule", brokenDR},
		{"VirtualService", brokenVS},
	} {
		b.Run(tc.kind, func(b *testing.B) {
			body := reviewBody(b, reviewSpec{group: istioNetworkingGroup, version: "v1", kind: tc.kind, op: admissionv1.Create, object: tc.object})
			h := NewValidationHandler(ValidationOptions{Logger: discardLogger()})
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest(http.MethodPost, ValidatePath, bytes.NewReader(body))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatal(w.Code)
				}
			}
		})
	}
}
