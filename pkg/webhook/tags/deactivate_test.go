package tags

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// labelSets are namespace and pod labels that the default injector's
// webhooks select before deactivation.
var labelSets = []struct{ ns, pod map[string]string }{
	{map[string]string{"istio-injection": "enabled"}, nil},
	{nil, map[string]string{"sidecar.istio.io/inject": "true"}},
	{map[string]string{"istio.io/rev": "default"}, nil},
	{nil, nil},
}

func TestDeactivateRestoreRoundTrip(t *testing.T) {
	original := readInjector(t, "testdata/prod-on-default.in.yaml")
	original.Annotations = map[string]string{"kept": "yes"}

	matchedBefore := 0
	for _, ls := range labelSets {
		matchedBefore += len(matching(t, original, ls.ns, ls.pod))
	}
	if matchedBefore == 0 {
		t.Fatal("fixture injector matches none of the label sets; the test would prove nothing")
	}

	off, err := Deactivate(original)
	if err != nil {
		t.Fatal(err)
	}
	if !IsDeactivated(off) || IsDeactivated(original) {
		t.Fatalf("IsDeactivated: copy %v, original %v", IsDeactivated(off), IsDeactivated(original))
	}
	if len(off.Webhooks) != len(original.Webhooks) {
		t.Fatalf("deactivation dropped webhooks: %d of %d left", len(off.Webhooks), len(original.Webhooks))
	}
	for _, ls := range labelSets {
		if got := matching(t, off, ls.ns, ls.pod); len(got) > 0 {
			t.Errorf("deactivated injector still matches ns %v pod %v: %v", ls.ns, ls.pod, got)
		}
	}
	// Even an object carrying every label the injector knows stays unmatched.
	all := map[string]string{"istio-injection": "enabled", "istio.io/rev": "default", "sidecar.istio.io/inject": "true"}
	if got := matching(t, off, all, all); len(got) > 0 {
		t.Errorf("deactivated injector matches %v", got)
	}
	for i, wh := range off.Webhooks {
		if diff := cmp.Diff(original.Webhooks[i].ClientConfig, wh.ClientConfig); diff != "" {
			t.Errorf("deactivation changed %s's clientConfig:\n%s", wh.Name, diff)
		}
	}

	again, err := Deactivate(off)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(off, again); diff != "" {
		t.Errorf("deactivating twice changed the object (-once +twice):\n%s", diff)
	}

	on, err := Restore(again)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(original, on); diff != "" {
		t.Errorf("restore is not the original (-original +restored):\n%s", diff)
	}
}

func TestRestoreWithoutDeactivationIsUnchanged(t *testing.T) {
	original := readInjector(t, "testdata/prod-on-1-8-1.in.yaml")
	got, err := Restore(original)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(original, got); diff != "" {
		t.Errorf("restore changed an active injector:\n%s", diff)
	}
}

func TestRestoreKeepsWebhooksWithoutSavedSelectors(t *testing.T) {
	off, err := Deactivate(readInjector(t, "testdata/prod-on-1-8-1.in.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	off.Webhooks[1].Name = "added.later.example.com"
	on, err := Restore(off)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(NeverMatch(), on.Webhooks[1].NamespaceSelector); diff != "" {
		t.Errorf("unsaved webhook's selector changed:\n%s", diff)
	}
	if matchesSelector(t, on.Webhooks[0].NamespaceSelector, map[string]string{LabelDeactivated: NeverMatchValue}) {
		t.Error("saved webhook kept the never-match selector")
	}
}

func TestRestoreRejectsCorruptAnnotation(t *testing.T) {
	injector := readInjector(t, "testdata/prod-on-1-8-1.in.yaml")
	injector.Annotations = map[string]string{AnnotationSavedSelectors: "{not json"}
	if _, err := Restore(injector); err == nil {
		t.Error("corrupt annotation accepted")
	}
}
