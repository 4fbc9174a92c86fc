package tags

import (
	"os"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"
)

func TestBuildTagWebhookGolden(t *testing.T) {
	for _, tc := range []struct {
		name, tag, rev string
	}{
		{"prod-on-1-8-1", "prod", "1-8-1"},
		{"default-on-1-8-1", "default", "1-8-1"},
		{"prod-on-default", "prod", "default"},
		{"default-on-default", "default", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			injector := readInjector(t, "testdata/"+tc.name+".in.yaml")
			got, err := yaml.Marshal(BuildTagWebhook(tc.tag, tc.rev, injector))
			if err != nil {
				t.Fatal(err)
			}
			compareGolden(t, tc.name+".out.yaml", got)
		})
	}
}

func TestBuildTagWebhookMetadata(t *testing.T) {
	injector := readInjector(t, "testdata/prod-on-1-8-1.in.yaml")
	for _, tc := range []struct {
		tag, rev, wantName, wantRev string
	}{
		{"prod", "1-8-1", "istio-revision-tag-prod", "1-8-1"},
		{"default", "1-8-1", "istio-revision-tag-default", "1-8-1"},
		{"canary", "", "istio-revision-tag-canary", "default"},
	} {
		got := BuildTagWebhook(tc.tag, tc.rev, injector)
		if got.Name != tc.wantName {
			t.Errorf("tag %s: name %q, want %q", tc.tag, got.Name, tc.wantName)
		}
		wantLabels := map[string]string{"istio.io/tag": tc.tag, "istio.io/rev": tc.wantRev, "app": "sidecar-injector"}
		if diff := cmp.Diff(wantLabels, got.Labels); diff != "" {
			t.Errorf("tag %s: labels (-want +got):\n%s", tc.tag, diff)
		}
		if got.Kind != "MutatingWebhookConfiguration" || got.APIVersion != "admissionregistration.k8s.io/v1" {
			t.Errorf("tag %s: type %s %s", tc.tag, got.APIVersion, got.Kind)
		}
	}
}

// TestBuildTagWebhookCopiesInjector checks that everything but the name and
// the selectors comes from the injector webhook of the same name, and that
// the injector is left untouched.
func TestBuildTagWebhookCopiesInjector(t *testing.T) {
	injector := readInjector(t, "testdata/prod-on-default.in.yaml")
	before := injector.DeepCopy()
	revOnly := []string{"rev.namespace.sidecar-injector.istio.io", "rev.object.sidecar-injector.istio.io"}
	// The default tag also answers istio-injection=enabled, as the default
	// revision does.
	all := append(slices.Clone(revOnly), "namespace.sidecar-injector.istio.io", "object.sidecar-injector.istio.io")
	for _, tc := range []struct {
		tag   string
		names []string
	}{{"prod", revOnly}, {"default", all}} {
		tag := tc.tag
		got := BuildTagWebhook(tag, "default", injector)
		var names []string
		for _, wh := range got.Webhooks {
			names = append(names, wh.Name)
		}
		if !slices.Equal(names, tc.names) {
			t.Errorf("tag %s: webhooks %v, want %v", tag, names, tc.names)
		}
		for _, wh := range got.Webhooks {
			// Found by name here, not with the builder's own lookup.
			i := slices.IndexFunc(injector.Webhooks, func(src admissionregistrationv1.MutatingWebhook) bool { return src.Name == wh.Name })
			if i < 0 {
				t.Fatalf("tag %s: webhook %s has no same-named injector webhook", tag, wh.Name)
			}
			want := injector.Webhooks[i].DeepCopy()
			want.NamespaceSelector, want.ObjectSelector = wh.NamespaceSelector, wh.ObjectSelector
			if diff := cmp.Diff(*want, wh); diff != "" {
				t.Errorf("tag %s webhook %s differs from its injector webhook beyond selectors (-want +got):\n%s", tag, wh.Name, diff)
			}
		}
		got.Webhooks[0].ClientConfig.CABundle[0] = 'X'
		got.Webhooks[0].Rules[0].Operations[0] = admissionregistrationv1.Delete
	}
	if diff := cmp.Diff(before, injector); diff != "" {
		t.Errorf("building a tag changed the injector (-before +after):\n%s", diff)
	}
}

func TestBuildTagWebhookFallsBackToFirstInjectionWebhook(t *testing.T) {
	url := "https://injector.example:15017/inject"
	injector := &admissionregistrationv1.MutatingWebhookConfiguration{
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			{Name: "other.example.com"},
			{Name: "sidecar-injector.istio.io", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: []byte("ca")}},
		},
	}
	got := BuildTagWebhook("prod", "1-7-6", injector)
	if len(got.Webhooks) != 2 {
		t.Fatalf("got %d webhooks, want 2", len(got.Webhooks))
	}
	for _, wh := range got.Webhooks {
		if wh.ClientConfig.URL == nil || *wh.ClientConfig.URL != url || string(wh.ClientConfig.CABundle) != "ca" {
			t.Errorf("webhook %s clientConfig %+v, want the legacy injection webhook's", wh.Name, wh.ClientConfig)
		}
	}
}

// TestTagSelectors evaluates the selectors against labelled namespaces and
// pods: exactly one webhook must match an opted-in pod (two would inject
// twice) and none any other pod.
func TestTagSelectors(t *testing.T) {
	injector := readInjector(t, "testdata/prod-on-1-8-1.in.yaml")
	type labels = map[string]string
	for _, tc := range []struct {
		name     string
		tag      string
		ns, pod  labels
		selected bool
	}{
		{"prod: namespace labelled", "prod", labels{"istio.io/rev": "prod"}, nil, true},
		{"prod: namespace labelled, pod opts out", "prod", labels{"istio.io/rev": "prod"}, labels{"sidecar.istio.io/inject": "false"}, false},
		{"prod: namespace labelled, pod opts in", "prod", labels{"istio.io/rev": "prod"}, labels{"sidecar.istio.io/inject": "true"}, true},
		{"prod: legacy namespace label wins", "prod", labels{"istio.io/rev": "prod", "istio-injection": "enabled"}, nil, false},
		{"prod: pod labelled in plain namespace", "prod", nil, labels{"istio.io/rev": "prod"}, true},
		{"prod: pod labelled, opts out", "prod", nil, labels{"istio.io/rev": "prod", "sidecar.istio.io/inject": "false"}, false},
		{"prod: namespace revision wins over pod", "prod", labels{"istio.io/rev": "1-7-6"}, labels{"istio.io/rev": "prod"}, false},
		{"prod: other tag", "prod", labels{"istio.io/rev": "canary"}, nil, false},
		{"prod: unlabelled", "prod", nil, nil, false},
		{"prod: legacy opt-in is not prod's", "prod", labels{"istio-injection": "enabled"}, nil, false},
		{"prod: legacy pod opt-in is not prod's", "prod", nil, labels{"sidecar.istio.io/inject": "true"}, false},
		{"default: legacy namespace", "default", labels{"istio-injection": "enabled"}, nil, true},
		{"default: legacy namespace, pod opts out", "default", labels{"istio-injection": "enabled"}, labels{"sidecar.istio.io/inject": "false"}, false},
		{"default: disabled namespace", "default", labels{"istio-injection": "disabled"}, labels{"sidecar.istio.io/inject": "true"}, false},
		{"default: pod opts in", "default", nil, labels{"sidecar.istio.io/inject": "true"}, true},
		{"default: pod opts in but names a revision", "default", nil, labels{"sidecar.istio.io/inject": "true", "istio.io/rev": "1-7-6"}, false},
		{"default: pod opts in inside a revision namespace", "default", labels{"istio.io/rev": "prod"}, labels{"sidecar.istio.io/inject": "true"}, false},
		{"default: namespace istio.io/rev=default", "default", labels{"istio.io/rev": "default"}, nil, true},
		{"default: pod istio.io/rev=default", "default", nil, labels{"istio.io/rev": "default"}, true},
		{"default: unlabelled", "default", nil, nil, false},
		{"default: other revision namespace", "default", labels{"istio.io/rev": "1-8-1"}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := matching(t, BuildTagWebhook(tc.tag, "1-8-1", injector), tc.ns, tc.pod)
			want := 0
			if tc.selected {
				want = 1
			}
			if len(got) != want {
				t.Errorf("%d webhooks matched (%v), want %d", len(got), got, want)
			}
		})
	}
}

func TestTagWebhookNames(t *testing.T) {
	injector := readInjector(t, "testdata/prod-on-1-8-1.in.yaml")
	names := func(tag string) []string {
		var out []string
		for _, wh := range BuildTagWebhook(tag, "1-8-1", injector).Webhooks {
			out = append(out, wh.Name)
		}
		return out
	}
	prod := names("prod")
	if !slices.Equal(prod, []string{WebhookRevNamespace, WebhookRevObject}) {
		t.Errorf("prod webhooks %v", prod)
	}
	def := names("default")
	if !slices.Equal(def, []string{WebhookRevNamespace, WebhookRevObject, WebhookNamespace, WebhookObject}) {
		t.Errorf("default webhooks %v", def)
	}
}

func TestCheckInjector(t *testing.T) {
	if err := CheckInjector(nil); err == nil {
		t.Error("nil injector accepted")
	}
	empty := &admissionregistrationv1.MutatingWebhookConfiguration{}
	empty.Name = "istio-sidecar-injector-1-7-6"
	if err := CheckInjector(empty); err == nil {
		t.Error("injector without webhooks accepted")
	}
	if err := CheckInjector(readInjector(t, "testdata/prod-on-1-8-1.in.yaml")); err != nil {
		t.Errorf("rendered injector refused: %v", err)
	}
}

func TestNames(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{InjectorName("", "istio-system"), "istio-sidecar-injector"},
		{InjectorName("default", ""), "istio-sidecar-injector"},
		{InjectorName("1-8-1", "istio-system"), "istio-sidecar-injector-1-8-1"},
		{InjectorName("1-8-1", "mesh"), "istio-sidecar-injector-1-8-1-mesh"},
		{TagWebhookName("prod", "istio-system"), "istio-revision-tag-prod"},
		{TagWebhookName("prod", "mesh"), "istio-revision-tag-prod-mesh"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	for _, bad := range []string{"", "Prod", "prod_1", "1.8.1", "-x"} {
		if ValidateTag(bad) == nil {
			t.Errorf("ValidateTag(%q) accepted", bad)
		}
	}
	for _, good := range []string{"prod", "default", "1-8-1", "canary2"} {
		if err := ValidateTag(good); err != nil {
			t.Errorf("ValidateTag(%q): %v", good, err)
		}
		if err := ValidateRevision(good); err != nil {
			t.Errorf("ValidateRevision(%q): %v", good, err)
		}
	}
}

// BenchmarkBuildTagWebhook measures building the default tag (four deep
// copies of the injector's webhooks); the CLI and chart tests call it once
// per tag, so this only guards against accidental blow-ups.
func BenchmarkBuildTagWebhook(b *testing.B) {
	raw, err := os.ReadFile("testdata/default-on-1-8-1.in.yaml")
	if err != nil {
		b.Fatal(err)
	}
	var injector admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.Unmarshal(raw, &injector); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = BuildTagWebhook("default", "1-8-1", &injector)
	}
}
