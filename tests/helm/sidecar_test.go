package helm

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/pkg/webhook/inject"
)

// TestInjectionTemplateIsTheInjectorDefault checks that the chart ships the
// injector's own default template (make generate copies it), never a
// hand-edited fork.
func TestInjectionTemplateIsTheInjectorDefault(t *testing.T) {
	root := newTools(t).root
	got, err := os.ReadFile(filepath.Join(root, "charts", "pilot", "files", "injection-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, inject.DefaultConfig()) {
		t.Error("charts/pilot/files/injection-config.yaml differs from pkg/webhook/inject/defaults/config.yaml: run make generate")
	}
}

// TestInjectorValuesCoverDefaults checks that the "values" the chart
// renders have every key, with the same kind of value, that the injector's
// default values have: the template reads them without fallbacks.
func TestInjectorValuesCoverDefaults(t *testing.T) {
	tl := newTools(t)
	var defaults map[string]any
	if err := json.Unmarshal(inject.DefaultValues(), &defaults); err != nil {
		t.Fatal(err)
	}
	for _, c := range loadCases(t) {
		t.Run(c.name, func(t *testing.T) {
			cm := injectorConfigMap(t, tl.render(t, c, "pilot", false))
			var values map[string]any
			if err := json.Unmarshal([]byte(cm.Data["values"]), &values); err != nil {
				t.Fatalf("values: %v", err)
			}
			for _, missing := range missingKeys("", defaults, values) {
				t.Errorf("values lack %s", missing)
			}
		})
	}
}

// missingKeys lists the paths of want that got lacks or holds with another
// JSON type.
func missingKeys(prefix string, want, got map[string]any) []string {
	var out []string
	for k, w := range want {
		path := strings.TrimPrefix(prefix+"."+k, ".")
		g, ok := got[k]
		if !ok || (w != nil && g != nil && reflect.TypeOf(w) != reflect.TypeOf(g)) {
			out = append(out, path)
			continue
		}
		if wm, ok := w.(map[string]any); ok {
			out = append(out, missingKeys(path, wm, g.(map[string]any))...)
		}
	}
	sort.Strings(out)
	return out
}

// TestChartInjectsWithTheRealInjector hands the rendered injector
// ConfigMap to pilot's injector, as the mounted --inject-config-dir, and
// checks that a Pod opted in to the case's revision gets the sidecar the
// values describe.
func TestChartInjectsWithTheRealInjector(t *testing.T) {
	tl := newTools(t)
	for _, c := range loadCases(t) {
		for _, cni := range []bool{false, true} {
			name, variant := c.name, c
			if cni {
				name += "/cni"
				variant.values = map[string]map[string]any{
					"pilot": withValue(c.values["pilot"], "sidecarInjectorWebhook", "cniEnabled", true),
				}
			}
			t.Run(name, func(t *testing.T) {
				cm := injectorConfigMap(t, tl.render(t, variant, "pilot", false))
				dir := t.TempDir()
				for _, key := range []string{inject.ConfigFile, inject.ValuesFile} {
					if err := os.WriteFile(filepath.Join(dir, key), []byte(cm.Data[key]), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				revision, _ := c.values["pilot"]["revision"].(string)
				nsLabels := map[string]string{"istio-injection": "enabled"}
				if revision != "" {
					nsLabels = map[string]string{"istio.io/rev": revision}
				}
				h, err := inject.NewHandler(inject.Options{
					ConfigDir:       dir,
					Revision:        revision,
					NamespaceLabels: func(string) map[string]string { return nsLabels },
				})
				if err != nil {
					t.Fatalf("injector rejects the chart's ConfigMap: %v", err)
				}
				resp := h.Review(context.Background(), podCreation(t))
				if !resp.Allowed || len(resp.Patch) == 0 {
					t.Fatalf("not injected: allowed=%v result=%v", resp.Allowed, resp.Result)
				}
				patch := string(resp.Patch)
				want := []string{`"istio-proxy"`, `ghcr.io/meshpilot/proxyv2:0.1.0`, `sidecar.istio.io/status`}
				if revision != "" {
					want = append(want, "istiod-"+revision+".istio-system.svc:15012")
				} else {
					want = append(want, "istiod.istio-system.svc:15012")
				}
				for _, w := range want {
					if !strings.Contains(patch, w) {
						t.Errorf("patch lacks %s:\n%s", w, patch)
					}
				}
				if hasInit := strings.Contains(patch, `"istio-init"`); hasInit == cni {
					t.Errorf("cni=%v but istio-init in the patch: %v", cni, hasInit)
				}
			})
		}
	}
}

func podCreation(t *testing.T) *admissionv1.AdmissionRequest {
	t.Helper()
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "example.com/web:1"}}},
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionRequest{
		UID:       "test",
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Namespace: "shop",
		Name:      "web-0",
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: raw},
	}
}

// injectorConfigMap finds the injector ConfigMap in a rendered chart.
func injectorConfigMap(t *testing.T, rendered string) *corev1.ConfigMap {
	t.Helper()
	for _, doc := range strings.Split(rendered, "\n---\n") {
		var cm corev1.ConfigMap
		if err := yaml.Unmarshal([]byte(doc), &cm); err != nil || cm.Kind != "ConfigMap" {
			continue
		}
		if strings.HasPrefix(cm.Name, "istio-sidecar-injector") {
			return &cm
		}
	}
	t.Fatal("no istio-sidecar-injector ConfigMap rendered")
	return nil
}

// withValue returns a copy of values with values[section][key] = v.
func withValue(values map[string]any, section, key string, v any) map[string]any {
	out := map[string]any{}
	for k, x := range values {
		out[k] = x
	}
	inner := map[string]any{}
	if old, ok := out[section].(map[string]any); ok {
		for k, x := range old {
			inner[k] = x
		}
	}
	inner[key] = v
	out[section] = inner
	return out
}
