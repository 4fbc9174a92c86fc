package inject

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const simplePod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"app","namespace":"shop"},
"spec":{"containers":[{"name":"app","image":"example.com/app:1"}]}}`

func enabledNamespace(string) map[string]string { return map[string]string{LabelInjection: "enabled"} }

func newTestHandler(t *testing.T, config []byte, opts Options) *Handler {
	t.Helper()
	if config == nil {
		config = DefaultConfig()
	}
	opts.ConfigDir = writeConfigDir(t, config, DefaultValues())
	if opts.NamespaceLabels == nil && opts.Kube == nil {
		opts.NamespaceLabels = enabledNamespace
	}
	h, err := NewHandler(opts)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestServeHTTPRejectsMalformedRequests(t *testing.T) {
	h := newTestHandler(t, nil, Options{})
	tests := []struct {
		name        string
		method      string
		contentType string
		body        string
		want        int
	}{
		{name: "GET", method: http.MethodGet, contentType: "application/json", want: http.StatusMethodNotAllowed},
		{name: "wrong content type", method: http.MethodPost, contentType: "text/plain", body: "{}", want: http.StatusUnsupportedMediaType},
		{name: "not JSON", method: http.MethodPost, contentType: "application/json", body: "{", want: http.StatusBadRequest},
		{name: "no request", method: http.MethodPost, contentType: "application/json; charset=utf-8",
			body: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, want: http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, "/inject", strings.NewReader(tt.body))
			req.Header.Set("Content-Type", tt.contentType)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Fatalf("status %d (%s), want %d", rec.Code, strings.TrimSpace(rec.Body.String()), tt.want)
			}
		})
	}
}

func TestReviewPassesOtherRequests(t *testing.T) {
	h := newTestHandler(t, nil, Options{})
	tests := []struct {
		name string
		req  admissionv1.AdmissionRequest
	}{
		{name: "update", req: admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Operation: admissionv1.Update, Object: runtime.RawExtension{Raw: []byte(simplePod)}}},
		{name: "deployment", req: admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: []byte(`{}`)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := h.Review(context.Background(), &tt.req)
			if !resp.Allowed || resp.Patch != nil {
				t.Fatalf("allowed=%v patch=%s, want allowed unchanged", resp.Allowed, resp.Patch)
			}
		})
	}
}

// TestTemplateErrorsNameTheLine checks that every way a template can break
// denies admission with a message that points at the faulty line.
func TestTemplateErrorsNameTheLine(t *testing.T) {
	tests := []struct {
		name        string
		template    string
		annotations string
		// wantParts must all appear in the message.
		wantParts []string
	}{
		{
			name:      "parse error",
			template:  "spec:\n  containers:\n  - name: {{ nope }}\n",
			wantParts: []string{`injection template "sidecar" does not parse`, "template: sidecar:3:", `"nope" not defined`},
		},
		{
			name:      "execution error",
			template:  "spec:\n  containers:\n  - name: istio-proxy\n    image: {{ .Values.global.missing.image }}\n",
			wantParts: []string{"template: sidecar:4:", "<.Values.global.missing.image>"},
		},
		{
			name:      "invalid YAML",
			template:  "spec:\n  containers:\n  - name: istio-proxy\n    image: a: b\n",
			wantParts: []string{`injection template "sidecar" rendered invalid YAML`, "line 4", `rendered line 4: "image: a: b"`},
		},
		{
			name:      "misspelt field",
			template:  "spec:\n  containers:\n  - name: istio-proxy\n    imagePulPolicy: Always\n",
			wantParts: []string{`unknown field "imagePulPolicy"`, `rendered line 4: "imagePulPolicy: Always"`},
		},
		{
			name:        "unknown template",
			template:    "spec: {}\n",
			annotations: `"inject.istio.io/templates":"sidecar,grpc"`,
			wantParts:   []string{`injection template "grpc" not found`, "[sidecar]"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			config := "templates:\n  sidecar: |\n" + indent(4, strings.TrimSuffix(tt.template, "\n")) + "\n"
			reg := prometheus.NewRegistry()
			h := newTestHandler(t, []byte(config), Options{Metrics: NewMetrics(reg)})
			pod := simplePod
			if tt.annotations != "" {
				pod = strings.Replace(pod, `"namespace":"shop"`, `"namespace":"shop","annotations":{`+tt.annotations+`}`, 1)
			}
			resp := serveReview(t, h, "shop", []byte(pod))
			if resp.Allowed || resp.Patch != nil {
				t.Fatalf("allowed=%v patch=%s, want denied", resp.Allowed, resp.Patch)
			}
			if resp.Result == nil {
				t.Fatal("denied without a Result")
			}
			for _, part := range tt.wantParts {
				if !strings.Contains(resp.Result.Message, part) {
					t.Errorf("message %q lacks %q", resp.Result.Message, part)
				}
			}
			if got := testutil.ToFloat64(h.opts.Metrics.Requests.WithLabelValues(OutcomeFailed, "inject")); got != 1 {
				t.Errorf("failed requests counted %v, want 1", got)
			}
		})
	}
}

func TestNamespaceLabelsFallBackToTheAPI(t *testing.T) {
	shop := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{LabelInjection: "enabled"}}}
	tests := []struct {
		name       string
		cache      func(string) map[string]string
		objects    []runtime.Object
		apiErr     error
		wantPatch  bool
		wantDenied bool
	}{
		{name: "cache knows", cache: enabledNamespace, wantPatch: true},
		{name: "cache lags, API knows", cache: func(string) map[string]string { return nil }, objects: []runtime.Object{shop}, wantPatch: true},
		{name: "API only", objects: []runtime.Object{shop}, wantPatch: true},
		{name: "namespace unknown", objects: nil},
		{name: "API fails", apiErr: errors.New("etcd is on fire"), wantDenied: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(tt.objects...)
			if tt.apiErr != nil {
				client.PrependReactor("get", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, tt.apiErr
				})
			}
			h := newTestHandler(t, nil, Options{NamespaceLabels: tt.cache, Kube: client})
			resp := serveReview(t, h, "shop", []byte(simplePod))
			if resp.Allowed == tt.wantDenied {
				t.Fatalf("allowed=%v, want denied=%v (%v)", resp.Allowed, tt.wantDenied, resp.Result)
			}
			if (len(resp.Patch) > 0) != tt.wantPatch {
				t.Fatalf("patch=%s, want patch=%v", resp.Patch, tt.wantPatch)
			}
			if tt.wantDenied && !strings.Contains(resp.Result.Message, "etcd is on fire") {
				t.Fatalf("message %q does not carry the API error", resp.Result.Message)
			}
		})
	}
}

func TestNewHandlerRejectsBadConfiguration(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name   string
		opts   Options
		config string
		values string
		want   string
	}{
		{name: "no namespace source", opts: Options{ConfigDir: dir}, want: "NamespaceLabels or Options.Kube"},
		{name: "missing files", opts: Options{ConfigDir: filepath.Join(dir, "absent"), NamespaceLabels: enabledNamespace},
			want: "read injection config"},
		{name: "bad policy", config: "policy: sometimes\n", values: "{}", want: `policy "sometimes"`},
		{name: "unknown config field", config: "polcy: enabled\n", values: "{}", want: `unknown field "polcy"`},
		{name: "values not JSON", config: "policy: enabled\n", values: "{", want: `parse "values" file`},
		{name: "bad mesh config", config: "policy: enabled\n", values: `{"meshConfig":{"defaultConfig":{"concurrency":"many"}}}`,
			want: "values.meshConfig"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts
			if tt.config != "" {
				opts = Options{ConfigDir: writeConfigDir(t, []byte(tt.config), []byte(tt.values)), NamespaceLabels: enabledNamespace}
			}
			_, err := NewHandler(opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// Without a mounted ConfigMap the built-in template is served, so a local
// control plane injects the same sidecar as a default installation.
func TestNoConfigDirServesTheBuiltInTemplate(t *testing.T) {
	h, err := NewHandler(Options{NamespaceLabels: enabledNamespace})
	if err != nil {
		t.Fatal(err)
	}
	want, err := parseConfig(DefaultConfig(), DefaultValues(), h.opts.XDSAddress)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.config.Load(); got.digest != want.digest {
		t.Errorf("served configuration %x is not the built-in one %x", got.digest[:8], want.digest[:8])
	}
}

func TestDefaultsAreServed(t *testing.T) {
	h := newTestHandler(t, nil, Options{})
	cfg := h.config.Load()
	if len(cfg.templateErrors) != 0 {
		t.Fatalf("default templates do not parse: %v", cfg.templateErrors)
	}
	if cfg.policy != policyEnabled || len(cfg.templates) == 0 {
		t.Fatalf("default config: policy %q, %d templates", cfg.policy, len(cfg.templates))
	}
	for _, name := range cfg.defaultTemplates {
		if cfg.templates[name] == nil {
			t.Fatalf("default template %q is not defined", name)
		}
	}
	// The defaults on disk are the embedded ones.
	for file, data := range map[string][]byte{"config.yaml": DefaultConfig(), "values.json": DefaultValues()} {
		onDisk, err := os.ReadFile(filepath.Join("defaults", file))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(onDisk, data) {
			t.Errorf("embedded %s differs from defaults/%s", file, file)
		}
	}
}

func TestMetricsCountOutcomes(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newTestHandler(t, nil, Options{Metrics: NewMetrics(reg)})
	serveReview(t, h, "shop", []byte(simplePod))
	optedOut := strings.Replace(simplePod, `"namespace":"shop"`, `"namespace":"shop","labels":{"sidecar.istio.io/inject":"false"}`, 1)
	serveReview(t, h, "shop", []byte(optedOut))
	if got := testutil.ToFloat64(h.opts.Metrics.Requests.WithLabelValues(OutcomeInjected, "")); got != 1 {
		t.Errorf("injected = %v, want 1", got)
	}
	if got := testutil.ToFloat64(h.opts.Metrics.Requests.WithLabelValues(OutcomeSkipped, skipOptedOut)); got != 1 {
		t.Errorf("skipped opted_out = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(h.opts.Metrics.Duration); got != 1 {
		t.Errorf("duration series = %d, want 1", got)
	}
}
