package envoygen

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// TestGatewayGolden runs every testdata/gateway/<case>.in.yaml through LDS,
// then RDS for the routes the listeners name and SDS for the secrets they
// name (as Envoy asks), and compares the result with <case>.out.yaml.
//
// Inputs hold one TestProxy and usually `kind: TestCertificate` documents
// (see fixture_test.go). Outputs name the generated certificates instead of
// showing them, once the test has checked that SDS sent exactly the
// generated PEM.
func TestGatewayGolden(t *testing.T) {
	runGoldenCases(t, "gateway", runGatewayGolden)
}

func runGatewayGolden(t *testing.T, f fixture) []byte {
	t.Helper()
	var logs bytes.Buffer
	set := New(Options{Logger: testLogger(&logs)})
	push := pushcontext.Build(f.store, gatewayTestPushOptions(), nil, nil)
	tp := f.onlyProxy(t)
	proxy := tp.model()

	listeners, routes, rw := generateListenersAndRoutes(t, set.Listeners, set.Routes, tp, proxy, push)
	if len(routes) != len(rw.ResourceNames) {
		t.Errorf("asked for routes %v, got %d", rw.ResourceNames, len(routes))
	}

	sw := &model.WatchedResource{TypeURL: SecretType, ResourceNames: sortedNames(referencedSecrets(t, listeners))}
	secrets := generateTwice(t, set.Secrets, proxy, push, sw)
	// Every secret a listener names must be served, or Envoy would keep
	// the whole listener warming.
	if len(secrets) != len(sw.ResourceNames) {
		t.Errorf("listeners name secrets %v, SDS served %d", sw.ResourceNames, len(secrets))
	}

	problems := map[string][]string{}
	for name, p := range push.IngressProblems() {
		problems[name.String()] = p
	}
	warnings := logLines(&logs)
	return renderGolden(t,
		goldenSection{"listeners", renderResources(t, listeners), false},
		goldenSection{"routes", renderResources(t, routes), false},
		goldenSection{"secrets", renderSecrets(t, sw, secrets, f.certs), false},
		goldenSection{"ingressProblems", problems, len(problems) == 0},
		goldenSection{"warnings", warnings, len(warnings) == 0},
	)
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
