package validation

import (
	"strings"
	"testing"

	security "istio.io/api/security/v1beta1"
	"sigs.k8s.io/yaml"
)

func parsePeerAuthentication(t *testing.T, spec string) *security.PeerAuthentication {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(spec))
	if err != nil {
		t.Fatalf("bad test YAML: %v", err)
	}
	pa := &security.PeerAuthentication{}
	if err := pa.UnmarshalJSON(js); err != nil {
		t.Fatalf("bad test spec: %v", err)
	}
	return pa
}

func TestValidatePeerAuthentication(t *testing.T) {
	cases := []struct {
		name      string
		paName    string // defaults to "pa"
		namespace string // defaults to "ns"
		spec      string
		// want lists a substring of each expected problem, in order; nil
		// means the policy is valid.
		want []string
	}{
		// What Istio accepts.
		{name: "empty spec: the namespace inherits", spec: `{}`},
		{name: "mesh-wide strict in the root namespace", namespace: "istio-system", spec: `mtls: {mode: STRICT}`},
		{name: "selector in the root namespace", namespace: "istio-system", spec: `
selector: {matchLabels: {app: reviews}}
mtls: {mode: DISABLE}`},
		{name: "every mode", spec: `
selector: {matchLabels: {app: reviews}}
mtls: {mode: UNSET}
portLevelMtls:
  "1": {mode: DISABLE}
  "8080": {mode: PERMISSIVE}
  "65535": {mode: STRICT}`},
		{name: "empty selector acts as the namespace's", spec: `
selector: {}
mtls: {mode: PERMISSIVE}`},
		{name: "port entry without a mode inherits", spec: `
selector: {matchLabels: {app: reviews}}
portLevelMtls: {"80": {}}`},
		{name: "qualified label key", spec: `selector: {matchLabels: {app.kubernetes.io/name: reviews, version: ""}}`},

		// What it refuses.
		{name: "bad object name", paName: "Bad_Name", spec: `{}`, want: []string{"metadata.name"}},
		{name: "bad namespace", namespace: "a.b", spec: `{}`, want: []string{"metadata.namespace"}},
		{
			name: "port-level mTLS without a selector",
			spec: `
mtls: {mode: STRICT}
portLevelMtls: {"80": {mode: DISABLE}}`,
			want: []string{"spec.portLevelMtls: needs a selector with at least one label"},
		},
		{
			name: "port-level mTLS under a selector without labels",
			spec: `
selector: {matchLabels: {}}
portLevelMtls: {"80": {mode: DISABLE}}`,
			want: []string{"spec.portLevelMtls: needs a selector with at least one label"},
		},
		{
			name: "port-level mTLS set but empty",
			spec: `
selector: {matchLabels: {app: reviews}}
portLevelMtls: {}`,
			want: []string{"spec.portLevelMtls: must list at least one port when set"},
		},
		{
			name: "port numbers out of range",
			spec: `
selector: {matchLabels: {app: reviews}}
portLevelMtls:
  "0": {mode: STRICT}
  "70000": {mode: STRICT}`,
			want: []string{
				"spec.portLevelMtls[0]: port number must be in 1..65535, got 0",
				"spec.portLevelMtls[70000]: port number must be in 1..65535, got 70000",
			},
		},
		{
			name: "unknown modes",
			spec: `
selector: {matchLabels: {app: reviews}}
mtls: {mode: 7}
portLevelMtls: {"80": {mode: 9}}`,
			want: []string{
				"spec.mtls.mode: unknown mode 7",
				"spec.portLevelMtls[80].mode: unknown mode 9",
			},
		},
		{
			name: "selector with empty key and wildcards",
			spec: `selector: {matchLabels: {"": x, "app*": reviews, version: "v*"}}`,
			want: []string{
				`spec.selector.matchLabels: empty label key (with value "x")`,
				`spec.selector.matchLabels: key "app*": wildcards are not supported`,
				`spec.selector.matchLabels: value of "version": wildcards are not supported`,
			},
		},
		{
			name: "selector with bad label syntax",
			spec: `selector: {matchLabels: {"bad key": "not valid!"}}`,
			want: []string{
				`spec.selector.matchLabels: key "bad key"`,
				`spec.selector.matchLabels: value of "bad key"`,
			},
		},
		{
			name:   "every problem in one error",
			paName: "Bad_Name",
			spec: `
mtls: {mode: 5}
portLevelMtls: {"0": {mode: STRICT}}`,
			want: []string{
				"metadata.name",
				"spec.mtls.mode: unknown mode 5",
				"spec.portLevelMtls: needs a selector",
				"spec.portLevelMtls[0]: port number must be in 1..65535",
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name, ns := tc.paName, tc.namespace
			if name == "" {
				name = "pa"
			}
			if ns == "" {
				ns = "ns"
			}
			got := problemsOf(ValidatePeerAuthentication(name, ns, parsePeerAuthentication(t, tc.spec)))
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i, want := range tc.want {
				if !strings.Contains(got[i], want) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], want)
				}
			}
		})
	}
}

func TestValidatePeerAuthenticationNilSpec(t *testing.T) {
	if err := ValidatePeerAuthentication("a", "b", nil); err == nil || !strings.Contains(err.Error(), "spec: is required") {
		t.Fatalf("got %v, want a missing-spec error", err)
	}
}

func TestValidatePeerAuthenticationDoesNotMutate(t *testing.T) {
	pa := parsePeerAuthentication(t, `{selector: {matchLabels: {app: a}}, portLevelMtls: {"80": {}}}`)
	before := pa.String()
	_ = ValidatePeerAuthentication("a", "b", pa)
	if pa.String() != before {
		t.Fatalf("spec changed: %s -> %s", before, pa.String())
	}
}
