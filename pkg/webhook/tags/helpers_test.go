package tags

import (
	"os"
	"path/filepath"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/xdstest"
)

func readInjector(t *testing.T, path string) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(raw, &mwc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &mwc
}

// compareGolden checks got against testdata/<name>, or rewrites it with -update.
func compareGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	xdstest.Golden(t, filepath.Join("testdata", name), got)
}

// selects evaluates a webhook's selectors the way the API server does: a
// nil selector matches everything.
func selects(t *testing.T, wh admissionregistrationv1.MutatingWebhook, nsLabels, podLabels map[string]string) bool {
	t.Helper()
	return matchesSelector(t, wh.NamespaceSelector, nsLabels) && matchesSelector(t, wh.ObjectSelector, podLabels)
}

func matchesSelector(t *testing.T, sel *metav1.LabelSelector, set map[string]string) bool {
	t.Helper()
	if sel == nil {
		return true
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("invalid selector %v: %v", sel, err)
	}
	return s.Matches(labels.Set(set))
}

// matching returns the names of mwc's webhooks that select a pod with
// podLabels in a namespace with nsLabels.
func matching(t *testing.T, mwc *admissionregistrationv1.MutatingWebhookConfiguration, nsLabels, podLabels map[string]string) []string {
	t.Helper()
	var names []string
	for _, wh := range mwc.Webhooks {
		if selects(t, wh, nsLabels, podLabels) {
			names = append(names, wh.Name)
		}
	}
	return names
}
