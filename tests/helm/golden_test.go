package helm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/xdstest"
)

// goldenCase is one testdata/<name>.in.yaml: values for each chart.
type goldenCase struct {
	name   string
	values map[string]map[string]any
}

const releaseNamespace = "istio-system"

func loadCases(t *testing.T) []goldenCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.in.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden cases in testdata (%v)", err)
	}
	var cases []goldenCase
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c := goldenCase{name: strings.TrimSuffix(filepath.Base(f), ".in.yaml")}
		if err := yaml.UnmarshalStrict(raw, &c.values); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		cases = append(cases, c)
	}
	return cases
}

// releaseName follows Istio's habit: istiod, istiod-<revision>.
func (c goldenCase) releaseName(chart string) string {
	if chart == "base" {
		return "istio-base"
	}
	if rev, _ := c.values["pilot"]["revision"].(string); rev != "" {
		return "istiod-" + rev
	}
	return "istiod"
}

// valuesFile writes the case's values for chart to a file for helm -f.
func (c goldenCase) valuesFile(t *testing.T, chart string) string {
	t.Helper()
	raw, err := yaml.Marshal(c.values[chart])
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), chart+"-values.yaml")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// render is `helm template` of one chart, with CRDs when includeCRDs.
func (tl *tools) render(t *testing.T, c goldenCase, chart string, includeCRDs bool) string {
	t.Helper()
	args := []string{"template", c.releaseName(chart), tl.chart(chart), "--namespace", releaseNamespace,
		"-f", c.valuesFile(t, chart)}
	if includeCRDs {
		args = append(args, "--include-crds")
	}
	return tl.run(t, "", tl.helm, args...)
}

// TestTemplateGolden renders both charts for each case; the CRDs are left
// out here (TestBaseCRDsAreGenerated covers them).
func TestTemplateGolden(t *testing.T) {
	tl := newTools(t)
	for _, c := range loadCases(t) {
		t.Run(c.name, func(t *testing.T) {
			got := "# charts/base\n" + tl.render(t, c, "base", false) + "# charts/pilot\n" + tl.render(t, c, "pilot", false)
			xdstest.Golden(t, filepath.Join("testdata", c.name+".out.yaml"), []byte(got))
		})
	}
}

// TestTemplateRejectsBadValues checks that values which would produce broken
// or clashing objects fail the render with a message naming the value.
func TestTemplateRejectsBadValues(t *testing.T) {
	tl := newTools(t)
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"revision not a DNS label", []string{"revision=Canary_1"}, "must be a DNS label"},
		{"revision named default", []string{"revision=default"}, "reserved"},
		{"tag equal to the revision", []string{"revision=canary", "revisionTags={canary}"}, "equals the revision"},
		{"tag default on the default revision", []string{"revisionTags={default}"}, "needs a revision"},
		{"unknown ingress mode", []string{"meshConfig.ingressControllerMode=SOMETIMES"}, "OFF, DEFAULT or STRICT"},
		// What a values file's bare OFF becomes: YAML reads it as false.
		{"ingress mode OFF unquoted", []string{"meshConfig.ingressControllerMode=false"}, `quote it: "OFF"`},
		{"autoscaler minimum above its maximum", []string{"pilot.autoscaleEnabled=true", "pilot.autoscaleMin=4", "pilot.autoscaleMax=2"}, "autoscaleMin must not be above"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", "istiod", tl.chart("pilot"), "--namespace", releaseNamespace}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			out, err := tl.try("", tl.helm, args...)
			if err == nil {
				t.Fatalf("rendered without error:\n%s", out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("error does not say %q:\n%s", tc.want, out)
			}
		})
	}
}
