package helm

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/pkg/webhook/tags"
)

// TestChartTagsMatchTheCLI renders revisionTags with the chart and checks
// that each tag webhook is the one `pilot tag set` would create from the
// rendered injector: Helm values and the CLI manage the same objects.
func TestChartTagsMatchTheCLI(t *testing.T) {
	tl := newTools(t)
	for _, c := range loadCases(t) {
		tagList, _ := c.values["pilot"]["revisionTags"].([]any)
		if len(tagList) == 0 {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			rev, _ := c.values["pilot"]["revision"].(string)
			configs := mutatingConfigs(t, tl.render(t, c, "pilot", false))
			injector := configs[tags.InjectorName(rev, releaseNamespace)]
			if injector == nil {
				t.Fatalf("no injector %s rendered", tags.InjectorName(rev, releaseNamespace))
			}
			for _, tag := range tagList {
				name := tags.TagWebhookName(tag.(string), releaseNamespace)
				rendered := configs[name]
				if rendered == nil {
					t.Fatalf("no %s rendered", name)
				}
				built := tags.BuildTagWebhook(tag.(string), rev, injector)
				if diff := cmp.Diff(built.Webhooks, rendered.Webhooks); diff != "" {
					t.Errorf("%s: the chart's webhooks differ from the CLI's (-cli +chart):\n%s", name, diff)
				}
				for _, label := range []string{tags.LabelTag, tags.LabelRev} {
					if built.Labels[label] != rendered.Labels[label] {
						t.Errorf("%s: label %s is %q in the chart, %q from the CLI", name, label, rendered.Labels[label], built.Labels[label])
					}
				}
			}
		})
	}
}

func mutatingConfigs(t *testing.T, rendered string) map[string]*admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	out := map[string]*admissionregistrationv1.MutatingWebhookConfiguration{}
	for _, doc := range strings.Split(rendered, "\n---\n") {
		var c admissionregistrationv1.MutatingWebhookConfiguration
		if err := yaml.Unmarshal([]byte(doc), &c); err == nil && c.Kind == "MutatingWebhookConfiguration" {
			out[c.Name] = &c
		}
	}
	return out
}
