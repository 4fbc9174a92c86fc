package inject

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/xdstest"
)

// goldenInput is a testdata/<case>.in.yaml file.
type goldenInput struct {
	// Revision is the injector's revision.
	Revision string `json:"revision"`
	// RevisionTags point at Revision. The harness always passes them, so
	// the revision check is strict.
	RevisionTags []string `json:"revisionTags"`
	// Values are merged over defaults/values.json.
	Values map[string]any `json:"values"`
	// Config, when set, replaces defaults/config.yaml.
	Config    string           `json:"config"`
	Namespace corev1.Namespace `json:"namespace"`
	// Pod is kept raw so that the patch is applied to exactly what an API
	// server would send.
	Pod json.RawMessage `json:"pod"`
}

// goldenOutput is a testdata/<case>.out.yaml file.
type goldenOutput struct {
	Allowed  bool   `json:"allowed"`
	Injected bool   `json:"injected"`
	Message  string `json:"message,omitempty"`
	// Pod is the input Pod with the response's JSONPatch applied.
	Pod json.RawMessage `json:"pod"`
}

func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "*.in.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) == 0 {
		t.Fatal("no testdata/*.in.yaml cases")
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			var input goldenInput
			if err := yaml.UnmarshalStrict(data, &input); err != nil {
				t.Fatalf("%s: %v", in, err)
			}
			h := newGoldenHandler(t, &input)
			resp := serveReview(t, h, input.Namespace.Name, input.Pod)

			out := goldenOutput{Allowed: resp.Allowed, Injected: len(resp.Patch) > 0}
			if resp.Result != nil {
				out.Message = resp.Result.Message
			}
			pod := []byte(input.Pod)
			if len(resp.Patch) > 0 {
				if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
					t.Fatalf("patch type %v, want JSONPatch", resp.PatchType)
				}
				pod = applyPatch(t, pod, resp.Patch)
				// The patched Pod must still be a valid Pod, and injecting
				// it again must change nothing.
				again := serveReview(t, h, input.Namespace.Name, pod)
				if !again.Allowed || len(again.Patch) != 0 {
					t.Errorf("re-injecting the injected Pod: allowed=%v patch=%s", again.Allowed, again.Patch)
				}
			}
			out.Pod = pod
			got, err := yaml.Marshal(out)
			if err != nil {
				t.Fatal(err)
			}
			xdstest.Golden(t, filepath.Join("testdata", name+".out.yaml"), got)
		})
	}
}

func newGoldenHandler(t *testing.T, input *goldenInput) *Handler {
	t.Helper()
	config := DefaultConfig()
	if input.Config != "" {
		config = []byte(input.Config)
	}
	values := DefaultValues()
	if input.Values != nil {
		var base map[string]any
		if err := json.Unmarshal(values, &base); err != nil {
			t.Fatal(err)
		}
		mergeValues(base, input.Values)
		var err error
		if values, err = json.MarshalIndent(base, "", "  "); err != nil {
			t.Fatal(err)
		}
	}
	dir := writeConfigDir(t, config, values)
	nsLabels := input.Namespace.Labels
	if nsLabels == nil {
		nsLabels = map[string]string{}
	}
	tags := slices.Clone(input.RevisionTags)
	h, err := NewHandler(Options{
		ConfigDir: dir,
		Revision:  input.Revision,
		NamespaceLabels: func(ns string) map[string]string {
			if ns != input.Namespace.Name {
				t.Errorf("labels asked for namespace %q, the Pod is in %q", ns, input.Namespace.Name)
			}
			return nsLabels
		},
		RevisionTags: func() ([]string, bool) { return tags, true },
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// mergeValues deep-merges src into dst, as Helm merges values.
func mergeValues(dst, src map[string]any) {
	for k, v := range src {
		if sv, ok := v.(map[string]any); ok {
			if dv, ok := dst[k].(map[string]any); ok {
				mergeValues(dv, sv)
				continue
			}
		}
		dst[k] = v
	}
}

func writeConfigDir(t testing.TB, config, values []byte) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), config, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ValuesFile), values, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// serveReview sends a Pod CREATE review through ServeHTTP, as the API
// server does, and returns the response after checking the envelope.
func serveReview(t testing.TB, h http.Handler, namespace string, pod []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	podJSON, err := yaml.YAMLToJSON(pod)
	if err != nil {
		t.Fatal(err)
	}
	uid := types.UID("review-" + namespace)
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       uid,
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: namespace,
			Operation: admissionv1.Create,
			Object:    runtime.RawExtension{Raw: podJSON},
		},
	}
	body, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/inject", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var got admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.APIVersion != "admission.k8s.io/v1" || got.Kind != "AdmissionReview" {
		t.Fatalf("response envelope %s/%s", got.APIVersion, got.Kind)
	}
	if got.Response == nil || got.Response.UID != uid {
		t.Fatalf("response %+v does not answer request %s", got.Response, uid)
	}
	return got.Response
}

func applyPatch(t testing.TB, doc, patch []byte) []byte {
	t.Helper()
	docJSON, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("decode patch %s: %v", patch, err)
	}
	out, err := p.Apply(docJSON)
	if err != nil {
		t.Fatalf("apply patch %s: %v", patch, err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(out, &pod); err != nil {
		t.Fatalf("patched document is not a Pod: %v", err)
	}
	return out
}
