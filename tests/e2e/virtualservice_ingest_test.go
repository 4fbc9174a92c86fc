package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// vsToV2YAML is the quick start's route: every call of echo goes to its
// subset v2.
const vsToV2YAML = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: echo
  namespace: {{.NS}}
spec:
  hosts: [{{.Host}}]
  http:
  - route:
    - destination: {host: {{.Host}}, subset: v2}
`

// invalidVSYAML passes the CRD's schema but breaks Istio's rules twice: a
// route that both forwards and redirects, to a subset that is no DNS
// label.
const invalidVSYAML = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: invalid
  namespace: {{.NS}}
spec:
  hosts: [{{.Host}}]
  http:
  - redirect: {uri: /elsewhere}
    route:
    - destination: {host: {{.Host}}, subset: Not_A_Label}
`

// typoVSYAML misspells a field and gives a weight that is not a number.
const typoVSYAML = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: typos
  namespace: {{.NS}}
spec:
  hosts: [{{.Host}}]
  http:
  - route:
    - destination: {host: {{.Host}}, subest: v2}
      weight: heavy
`

// The problems of invalidVSYAML and typoVSYAML, by field path.
var (
	invalidVSProblems = []string{
		"spec.http[0]: route and redirect are mutually exclusive",
		`spec.http[0].route[0].destination.subset: "Not_A_Label" is not a DNS label`,
	}
	typoVSProblems = []string{
		"spec.http[0].route[0].destination.subest: unknown field (did you mean subset?)",
		`spec.http[0].route[0].weight: want an integer, got "heavy"`,
	}
)

// TestVirtualServiceIngestConfigDir: `pilot discovery --config-dir` reads
// VirtualServices, refuses an invalid one and a misspelt one by field path
// (and file line), serves the valid one, and takes a fixed file back.
func TestVirtualServiceIngestConfigDir(t *testing.T) {
	const ns = "vs-dir"
	fx := fixtures{NS: ns, Host: "echo." + ns + ".svc.cluster.local"}
	m := newDirMesh(t)
	m.apply(t, "namespace", fx.render(namespaceYAML))
	m.apply(t, "vs", fx.render(vsToV2YAML))
	m.apply(t, "vs-invalid", fx.render(invalidVSYAML))
	m.apply(t, "vs-typos", fx.render(typoVSYAML))
	cp := startControlPlane(t, m)

	problems := map[string]model.SourceProblem{}
	waitFor(t, 30*time.Second, "both VirtualService problems in /debug/pushcontext", func() error {
		clear(problems)
		for _, p := range sourceProblemsOf(t, cp) {
			problems[p.Name] = p
		}
		if len(problems) != 2 || problems["invalid"].Kind != "VirtualService" || problems["typos"].Kind != "VirtualService" {
			return fmt.Errorf("problems %+v", problems)
		}
		return nil
	})

	t.Run("an invalid VirtualService is refused with every reason", func(t *testing.T) {
		p := problems["invalid"]
		if p.File != filepath.Join(m.dir, "vs-invalid.yaml") || p.Namespace != ns || !strings.HasPrefix(p.Message, "rejected (invalid): ") {
			t.Errorf("problem %+v", p)
		}
		for _, want := range invalidVSProblems {
			if !strings.Contains(p.Message, want) {
				t.Errorf("problem %q lacks %q", p.Message, want)
			}
		}
	})

	t.Run("unknown fields and wrong types are refused, by path and line", func(t *testing.T) {
		p := problems["typos"]
		text := fx.render(typoVSYAML)
		line := func(s string) int { return strings.Count(text[:strings.Index(text, s)], "\n") + 1 }
		want := fmt.Sprintf("rejected (decode): line %d: %s; line %d: %s",
			line("subest"), typoVSProblems[0], line("weight"), typoVSProblems[1])
		if p.Message != want {
			t.Errorf("problem\n got %s\nwant %s", p.Message, want)
		}
	})

	t.Run("they are counted, and the valid one is applied", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			labels map[string]string
			want   float64
		}{
			{"meshpilot_config_errors_total", map[string]string{"source": "file", "kind": "VirtualService", "reason": "invalid"}, 1},
			{"meshpilot_config_errors_total", map[string]string{"source": "file", "kind": "VirtualService", "reason": "decode"}, 1},
			{"meshpilot_source_events_total", map[string]string{"source": "file", "kind": "VirtualService", "event": "upsert"}, 1},
		} {
			if got := metricWith(t, cp, tc.name, tc.labels); got != tc.want {
				t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
			}
		}
	})

	t.Run("a fixed file is taken back", func(t *testing.T) {
		m.apply(t, "vs-invalid", strings.Replace(strings.Replace(fx.render(invalidVSYAML),
			"  - redirect: {uri: /elsewhere}\n    route:\n", "  - route:\n", 1), "Not_A_Label", "v1", 1))
		waitFor(t, 30*time.Second, "only the misspelt VirtualService to be refused", func() error {
			got := sourceProblemsOf(t, cp)
			if len(got) != 1 || got[0].Name != "typos" {
				return fmt.Errorf("problems %+v", got)
			}
			return nil
		})
		labels := map[string]string{"source": "file", "kind": "VirtualService", "event": "upsert"}
		if got := metricWith(t, cp, "meshpilot_source_events_total", labels); got != 2 {
			t.Errorf("meshpilot_source_events_total%v = %v, want 2", labels, got)
		}
	})
}

// TestVirtualServiceIngestWebhook applies VirtualServices with kubectl to
// a real API server whose validating webhook is meshpilot's, with the
// chart's rule: an invalid one is denied with every reason, a misspelt one
// is refused by the API server's own schema, and a valid one is admitted
// and read by the control plane's Kubernetes source.
func TestVirtualServiceIngestWebhook(t *testing.T) {
	t.Parallel()
	const ns = "vs-webhook"
	m := newKubeMesh(t)
	fx := fixtures{NS: ns, Host: "echo." + ns + ".svc.cluster.local"}
	m.apply(t, "namespace", fx.render(namespaceYAML))
	cp := startWithValidator(t, m)
	// The webhook answers once its certificate is issued.
	var denial string
	waitFor(t, 30*time.Second, "the webhook to deny the invalid VirtualService", func() error {
		out, err := m.kubectlOutput(fx.render(invalidVSYAML), "apply", "-f", "-")
		if err == nil || !strings.Contains(out, `denied the request: VirtualService "vs-webhook/invalid" is invalid: `) {
			return fmt.Errorf("%v: %s", err, out)
		}
		denial = out
		return nil
	})

	t.Run("the denial gives every reason", func(t *testing.T) {
		for _, want := range invalidVSProblems {
			if !strings.Contains(denial, want) {
				t.Errorf("denial lacks %q: %s", want, denial)
			}
		}
		if out, err := m.kubectlOutput("", "get", "virtualservice", "invalid", "-n", ns); err == nil {
			t.Errorf("the denied VirtualService exists: %s", out)
		}
	})

	t.Run("the API server refuses a misspelt field itself", func(t *testing.T) {
		out, err := m.kubectlOutput(fx.render(typoVSYAML), "apply", "-f", "-")
		if err == nil || !strings.Contains(out, `unknown field "spec.http[0].route[0].destination.subest"`) {
			t.Errorf("kubectl apply: %v: %s", err, out)
		}
	})

	t.Run("a valid VirtualService is admitted and read", func(t *testing.T) {
		if out, err := m.kubectlOutput(fx.render(vsToV2YAML), "apply", "-f", "-"); err != nil {
			t.Fatalf("kubectl apply: %v: %s", err, out)
		}
		waitFor(t, 30*time.Second, "the Kubernetes source to apply it", func() error {
			applied := metricWith(t, cp, "meshpilot_source_events_total",
				map[string]string{"source": "kubernetes", "kind": "VirtualService", "event": "upsert"})
			received := metricWith(t, cp, "pilot_k8s_cfg_events", map[string]string{"type": "VirtualService", "event": "add"})
			if applied != 1 || received != 1 {
				return fmt.Errorf("applied %v, received %v; want 1 and 1", applied, received)
			}
			return nil
		})
		if got := metricWith(t, cp, "meshpilot_config_errors_total", map[string]string{"kind": "VirtualService"}); got != 0 {
			t.Errorf("meshpilot_config_errors_total{kind=VirtualService} = %v, want 0: the webhook let nothing invalid in", got)
		}
	})
}

// metricWith sums the series of a counter or gauge the control plane
// exports whose labels include all of labels.
func metricWith(t *testing.T, cp *controlPlane, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := cp.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			matched := 0
			for k, v := range labels {
				if slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == k && l.GetValue() == v }) {
					matched++
				}
			}
			if matched != len(labels) {
				continue
			}
			if g := m.GetGauge(); g != nil {
				sum += g.GetValue()
			} else {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
