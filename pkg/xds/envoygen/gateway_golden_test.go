package envoygen

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// TestGatewayGolden runs every testdata/gateway/<case>.in.yaml through LDS,
// then RDS for the routes the listeners name and SDS for the secrets they
// name (as Envoy asks), and compares the result with <case>.out.yaml.
//
// Inputs are the listener goldens' format (Kubernetes documents and one
// TestProxy) plus `kind: TestCertificate` documents (namespace, name,
// hosts), each of which becomes a kubernetes.io/tls Secret holding a
// certificate generated for the run. Outputs name such certificates instead
// of showing them, once the test has checked that SDS sent exactly the
// generated PEM.
func TestGatewayGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/gateway/*.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) == 0 {
		t.Fatal("no gateway golden cases")
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			f, certs := loadGatewayFixture(t, in)
			got := runGatewayGolden(t, f, certs)
			xdstest.Golden(t, filepath.Join("testdata", "gateway", name+".out.yaml"), got)
		})
	}
}

// testCertificate is a `kind: TestCertificate` fixture document.
type testCertificate struct {
	Kind      string   `json:"kind"`
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Hosts     []string `json:"hosts"`
}

type generatedPEM struct{ cert, key []byte }

// loadGatewayFixture turns the TestCertificate documents into Secrets and
// loads the result as a listener fixture. It returns the generated PEM by
// Secret.
func loadGatewayFixture(t *testing.T, path string) (listenerFixture, map[model.NamespacedName]generatedPEM) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	certs := map[model.NamespacedName]generatedPEM{}
	var docs []string
	for _, doc := range yamlDocSeparator.Split(string(raw), -1) {
		var tc testCertificate
		if err := yaml.Unmarshal([]byte(doc), &tc); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if tc.Kind != "TestCertificate" {
			docs = append(docs, doc)
			continue
		}
		if err := yaml.UnmarshalStrict([]byte(doc), &tc); err != nil {
			t.Fatalf("%s: TestCertificate: %v", path, err)
		}
		pemPair := selfSignedPEM(t, tc.Hosts)
		certs[model.NamespacedName{Namespace: tc.Namespace, Name: tc.Name}] = pemPair
		secret, err := yaml.Marshal(map[string]any{
			"apiVersion": "v1",
			"kind":       "Secret",
			"metadata":   map[string]any{"name": tc.Name, "namespace": tc.Namespace},
			"type":       "kubernetes.io/tls",
			"data":       map[string]any{"tls.crt": pemPair.cert, "tls.key": pemPair.key}, // []byte marshals as base64
		})
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(secret))
	}
	tmp := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(strings.Join(docs, "\n---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	return loadListenerFixture(t, tmp), certs
}

// selfSignedPEM makes a throwaway ECDSA certificate for hosts.
func selfSignedPEM(t testing.TB, hosts []string) generatedPEM {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "meshpilot test"},
		DNSNames:     hosts,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return generatedPEM{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}

func gatewayTestPushOptions() pushcontext.Options {
	opts := listenerTestPushOptions()
	opts.Ingress = pushcontext.IngressOptions{
		Ownership: model.IngressOwnership{Class: "istio", Mode: model.IngressModeStrict},
	}
	return opts
}

type gatewayGoldenOutput struct {
	Listeners []json.RawMessage
	Routes    []json.RawMessage
	Secrets   []json.RawMessage
	Problems  map[string][]string
	Warnings  []string
}

func runGatewayGolden(t *testing.T, f listenerFixture, certs map[model.NamespacedName]generatedPEM) []byte {
	t.Helper()
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	set := New(Options{Logger: logger})
	push := pushcontext.Build(f.store, gatewayTestPushOptions(), nil, nil)
	proxy := f.proxy.model()

	lw := &model.WatchedResource{TypeURL: ListenerType, Wildcard: f.proxy.Request.Listeners == nil,
		ResourceNames: lrSorted(f.proxy.Request.Listeners)}
	listeners := lrGenerateTwice(t, set.Listeners, proxy, push, lw)
	checkListenerResources(t, lw, listeners)

	routeNames := f.proxy.Request.Routes
	if routeNames == nil {
		routeNames = referencedRoutes(t, listeners)
	}
	rw := &model.WatchedResource{TypeURL: RouteType, ResourceNames: lrSorted(routeNames)}
	routes := lrGenerateTwice(t, set.Routes, proxy, push, rw)
	checkListenerResources(t, rw, routes)
	if len(routes) != len(rw.ResourceNames) {
		t.Errorf("asked for routes %v, got %d", rw.ResourceNames, len(routes))
	}

	sw := &model.WatchedResource{TypeURL: SecretType, ResourceNames: lrSorted(referencedSecrets(t, listeners))}
	secrets := lrGenerateTwice(t, set.Secrets, proxy, push, sw)
	// Every secret a listener names must be served, or Envoy would keep
	// the whole listener warming.
	if len(secrets) != len(sw.ResourceNames) {
		t.Errorf("listeners name secrets %v, SDS served %d", sw.ResourceNames, len(secrets))
	}

	doc := gatewayGoldenOutput{
		Listeners: lrRenderResources(t, listeners),
		Routes:    lrRenderResources(t, routes),
		Secrets:   renderSecrets(t, sw, secrets, certs),
		Problems:  map[string][]string{},
	}
	for name, problems := range push.IngressProblems() {
		doc.Problems[name.String()] = problems
	}
	for line := range strings.Lines(logs.String()) {
		doc.Warnings = append(doc.Warnings, strings.TrimSpace(line))
	}
	return renderGatewayGolden(t, doc)
}

// referencedSecrets are the SDS names the listeners' TLS contexts use.
func referencedSecrets(t *testing.T, listeners model.Resources) []string {
	t.Helper()
	var names []string
	for _, r := range listeners {
		l := &listener.Listener{}
		if err := r.Resource.UnmarshalTo(l); err != nil {
			t.Fatal(err)
		}
		for _, fc := range l.GetFilterChains() {
			if fc.GetTransportSocket() == nil {
				continue
			}
			ctx := &tlsv3.DownstreamTlsContext{}
			if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
				t.Fatal(err)
			}
			for _, sds := range ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs() {
				if sds.GetSdsConfig().GetAds() == nil {
					t.Errorf("listener %s: secret %s is not fetched over ADS", l.GetName(), sds.GetName())
				}
				if !slices.Contains(names, sds.GetName()) {
					names = append(names, sds.GetName())
				}
			}
		}
	}
	return names
}

// renderSecrets checks every SDS resource (type, name, validation, and
// that it carries exactly the generated certificate and key of its Secret)
// and renders it with the PEM replaced by what it was.
func renderSecrets(t *testing.T, w *model.WatchedResource, res model.Resources, certs map[model.NamespacedName]generatedPEM) []json.RawMessage {
	t.Helper()
	out := []json.RawMessage{}
	for _, r := range res {
		if r.Resource.GetTypeUrl() != SecretType {
			t.Errorf("secret %s has type %s", r.Name, r.Resource.GetTypeUrl())
		}
		if !slices.Contains(w.ResourceNames, r.Name) {
			t.Errorf("secret %s was not requested", r.Name)
		}
		s := &tlsv3.Secret{}
		if err := r.Resource.UnmarshalTo(s); err != nil {
			t.Fatal(err)
		}
		if s.GetName() != r.Name {
			t.Errorf("secret %q carries name %q", r.Name, s.GetName())
		}
		if err := xdstest.ValidateDeep(s); err != nil {
			t.Errorf("secret %s fails validation: %v", r.Name, err)
		}
		ref, ok := parseSecretName(r.Name)
		want, generated := certs[ref]
		if !ok || !generated {
			t.Errorf("secret %s is not one of the fixture's generated certificates", r.Name)
			continue
		}
		tc := s.GetTlsCertificate()
		if !bytes.Equal(tc.GetCertificateChain().GetInlineBytes(), want.cert) || !bytes.Equal(tc.GetPrivateKey().GetInlineBytes(), want.key) {
			t.Errorf("secret %s does not carry the PEM of %s", r.Name, ref)
		}
		tc.CertificateChain = &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: "<generated certificate of " + ref.String() + ">"}}
		tc.PrivateKey = &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: "<generated key of " + ref.String() + ">"}}
		js, err := protojson.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, js)
	}
	return out
}

func parseSecretName(name string) (model.NamespacedName, bool) {
	rest, ok := strings.CutPrefix(name, credentialPrefix)
	if !ok {
		return model.NamespacedName{}, false
	}
	ns, n, ok := strings.Cut(rest, "/")
	return model.NamespacedName{Namespace: ns, Name: n}, ok
}

// renderGatewayGolden writes the sections in a fixed order, leaving empty
// problems and warnings out.
func renderGatewayGolden(t *testing.T, doc gatewayGoldenOutput) []byte {
	t.Helper()
	var out bytes.Buffer
	sections := []struct {
		name  string
		value any
		skip  bool
	}{
		{"listeners", doc.Listeners, false},
		{"routes", doc.Routes, false},
		{"secrets", doc.Secrets, false},
		{"ingressProblems", doc.Problems, len(doc.Problems) == 0},
		{"warnings", doc.Warnings, len(doc.Warnings) == 0},
	}
	for _, s := range sections {
		if s.skip {
			continue
		}
		js, err := json.Marshal(map[string]any{s.name: s.value})
		if err != nil {
			t.Fatal(err)
		}
		y, err := yaml.JSONToYAML(js)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(y)
	}
	return out.Bytes()
}
