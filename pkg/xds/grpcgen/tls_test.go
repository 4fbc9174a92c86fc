package grpcgen

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// The endpoint fast path changes the identities behind a service without a
// new push context version. A cluster cached before the change must not be
// served after it: the client would check the server against a stale list.
func TestClusterSANsFollowIdentitiesWithinOneVersion(t *testing.T) {
	store := model.NewStore()
	svc := model.NamespacedName{Namespace: "default", Name: "echo"}
	store.UpsertService(&model.Service{Name: "echo", Namespace: "default", Hostname: "echo.default.svc.cluster.local",
		Ports: []*model.Port{{Name: "grpc", Port: 7070, Protocol: model.ProtocolGRPC}}})
	setPods := func(accounts ...string) {
		var eps []*model.Endpoint
		for i, sa := range accounts {
			eps = append(eps, &model.Endpoint{Address: fmt.Sprintf("10.0.0.%d", i+1), Port: 7070, ServicePortName: "grpc",
				Namespace: "default", ServiceAccount: sa})
		}
		store.SetEndpoints(svc, "s1", eps)
	}
	setPods("echo")
	store.UpsertConfig(&model.Config{Kind: model.KindDestinationRule, Name: "echo", Namespace: "default", CreationTime: time.Unix(1, 0),
		Spec: &networking.DestinationRule{Host: "echo.default.svc.cluster.local",
			TrafficPolicy: &networking.TrafficPolicy{Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL}}}})
	push := pushcontext.Build(store, testPushOptions(), nil, nil)
	gen := NewClusterGenerator(Options{})
	proxy := &model.Proxy{Namespace: "default", Generator: "grpc"}
	w := &model.WatchedResource{TypeURL: ClusterType, ResourceNames: []string{"outbound|7070||echo.default.svc.cluster.local"}}
	sans := func() []string {
		t.Helper()
		res, err := gen.Generate(proxy, push, w, &model.PushRequest{Full: true})
		if err != nil || len(res) != 1 {
			t.Fatalf("CDS: %d clusters, %v", len(res), err)
		}
		c := &cluster.Cluster{}
		if err := res[0].Resource.UnmarshalTo(c); err != nil {
			t.Fatal(err)
		}
		return clientSANs(t, c)
	}

	if got, want := sans(), []string{"spiffe://cluster.local/ns/default/sa/echo"}; !slices.Equal(got, want) {
		t.Fatalf("SANs %v, want %v", got, want)
	}
	version := push.Version()
	setPods("echo", "echo-canary")
	if update := push.UpdateEndpoints(store, []model.NamespacedName{svc}); len(update.IdentitiesChanged) != 1 {
		t.Fatalf("UpdateEndpoints reported identity changes %v, want echo's", update.IdentitiesChanged)
	}
	if push.Version() != version {
		t.Fatal("the push context version changed; this test needs the same version")
	}
	want := []string{"spiffe://cluster.local/ns/default/sa/echo", "spiffe://cluster.local/ns/default/sa/echo-canary"}
	if got := sans(); !slices.Equal(got, want) {
		t.Errorf("after the identity change, SANs %v, want %v", got, want)
	}
}

// clientSANs returns the exact SANs a cluster's UpstreamTlsContext checks.
func clientSANs(t *testing.T, c *cluster.Cluster) []string {
	t.Helper()
	if c.GetTransportSocket() == nil {
		t.Fatalf("cluster %s has no transport socket", c.GetName())
	}
	ctx := &tlsv3.UpstreamTlsContext{}
	if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
		t.Fatal(err)
	}
	var out []string
	//lint:ignore SA1019 the field grpc-go reads (see commonTLSContext)
	for _, m := range ctx.GetCommonTlsContext().GetValidationContext().GetMatchSubjectAltNames() {
		out = append(out, m.GetExact())
	}
	return out
}

// The server's mode comes from the PeerAuthentications that select it; two
// servers that differ only in labels get different listeners.
func TestInboundModeByLabels(t *testing.T) {
	store := model.NewStore()
	store.UpsertConfig(&model.Config{Kind: model.KindPeerAuthentication, Name: "default", Namespace: "default",
		CreationTime: time.Unix(1, 0), Spec: &security.PeerAuthentication{
			Mtls: &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_PERMISSIVE}}})
	store.UpsertConfig(&model.Config{Kind: model.KindPeerAuthentication, Name: "secure", Namespace: "default",
		CreationTime: time.Unix(2, 0), Spec: &security.PeerAuthentication{
			Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "secure"}},
			Mtls:     &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_STRICT}}})
	push := pushcontext.Build(store, testPushOptions(), nil, nil)
	gen := NewListenerGenerator(Options{})
	name := InboundListenerPrefix + "0.0.0.0:8080"
	w := &model.WatchedResource{TypeURL: ListenerType, ResourceNames: []string{name}}

	tests := []struct {
		name      string
		namespace string
		labels    map[string]string
		wantMTLS  bool
	}{
		{"selected by the STRICT policy", "default", map[string]string{"app": "secure"}, true},
		{"namespace PERMISSIVE is plaintext", "default", map[string]string{"app": "other"}, false},
		{"PERMISSIVE with tlsMode=istio is mutual TLS", "default", map[string]string{"app": "other", model.TLSModeLabel: model.TLSModeIstio}, true},
		{"tlsMode other than istio changes nothing", "default", map[string]string{model.TLSModeLabel: "disabled"}, false},
		{"another namespace: mesh default PERMISSIVE", "other", map[string]string{"app": "secure"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			proxy := &model.Proxy{Namespace: tc.namespace, Labels: tc.labels, Generator: "grpc"}
			res, err := gen.Generate(proxy, push, w, &model.PushRequest{Full: true})
			if err != nil || len(res) != 1 {
				t.Fatalf("LDS: %d listeners, %v", len(res), err)
			}
			l := &listener.Listener{}
			if err := res[0].Resource.UnmarshalTo(l); err != nil {
				t.Fatal(err)
			}
			if err := grpcAccepts(l); err != nil {
				t.Fatalf("grpc-go would reject: %v", err)
			}
			ts := l.GetFilterChains()[0].GetTransportSocket()
			if got := ts != nil; got != tc.wantMTLS {
				t.Fatalf("mutual TLS %v, want %v", got, tc.wantMTLS)
			}
			if ts == nil {
				return
			}
			ctx := &tlsv3.DownstreamTlsContext{}
			if err := ts.GetTypedConfig().UnmarshalTo(ctx); err != nil {
				t.Fatal(err)
			}
			if !ctx.GetRequireClientCertificate().GetValue() {
				t.Error("STRICT does not require a client certificate")
			}
		})
	}
}

// The checker used by every golden and generator test must itself refuse
// what grpc-go refuses or ignores; otherwise a passing golden proves
// nothing.
func TestGRPCTLSCheckerRefuses(t *testing.T) {
	socket := func(name string, m proto.Message) *core.TransportSocket {
		a, err := marshalAny(m)
		if err != nil {
			t.Fatal(err)
		}
		return &core.TransportSocket{Name: name, ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: a}}
	}
	good := func() *tlsv3.CommonTlsContext { return commonTLSContext([]string{"spiffe://cluster.local/ns/a/sa/b"}) }
	server := func(edit func(*tlsv3.DownstreamTlsContext)) *core.TransportSocket {
		ctx := &tlsv3.DownstreamTlsContext{CommonTlsContext: commonTLSContext(nil), RequireClientCertificate: wrapperspb.Bool(true)}
		edit(ctx)
		return socket(transportSocketTLS, ctx)
	}
	client := func(edit func(*tlsv3.CommonTlsContext)) *core.TransportSocket {
		common := good()
		edit(common)
		return socket(transportSocketTLS, &tlsv3.UpstreamTlsContext{CommonTlsContext: common})
	}
	tests := []struct {
		name   string
		server bool
		ts     *core.TransportSocket
		want   string
	}{
		{"wrong socket name", false, socket("tls", &tlsv3.UpstreamTlsContext{CommonTlsContext: good()}), "named"},
		{"downstream context on a cluster", false, server(func(*tlsv3.DownstreamTlsContext) {}), "UpstreamTlsContext"},
		{"no root on the client", false, client(func(c *tlsv3.CommonTlsContext) {
			c.GetValidationContext().CaCertificateProviderInstance = nil
		}), "root"},
		{"typed SAN matchers, which grpc-go ignores", false, client(func(c *tlsv3.CommonTlsContext) {
			c.GetValidationContext().MatchTypedSubjectAltNames = []*tlsv3.SubjectAltNameMatcher{{
				SanType: tlsv3.SubjectAltNameMatcher_URI, Matcher: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "x"}}}}
		}), "typed"},
		{"an SDS certificate", false, client(func(c *tlsv3.CommonTlsContext) {
			c.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{{Name: "default"}}
		}), "certificate provider"},
		{"tls params", false, client(func(c *tlsv3.CommonTlsContext) { c.TlsParams = &tlsv3.TlsParameters{} }), "tls_params"},
		{"an instance the bootstrap does not define", false, client(func(c *tlsv3.CommonTlsContext) {
			c.TlsCertificateProviderInstance = &tlsv3.CertificateProviderPluginInstance{InstanceName: "file", CertificateName: "default"}
		}), "provider"},
		{"SAN matchers on the server", true, server(func(c *tlsv3.DownstreamTlsContext) { c.CommonTlsContext = good() }), "match_subject_alt_names"},
		{"no identity on the server", true, server(func(c *tlsv3.DownstreamTlsContext) {
			c.CommonTlsContext.TlsCertificateProviderInstance = nil
		}), "identity"},
		{"client certificate required without a root", true, server(func(c *tlsv3.DownstreamTlsContext) {
			c.CommonTlsContext.ValidationContextType = nil
		}), "root"},
		{"require sni", true, server(func(c *tlsv3.DownstreamTlsContext) { c.RequireSni = wrapperspb.Bool(true) }), "require_sni"},
		{"strict OCSP stapling", true, server(func(c *tlsv3.DownstreamTlsContext) {
			c.OcspStaplePolicy = tlsv3.DownstreamTlsContext_MUST_STAPLE
		}), "ocsp"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			check := grpcAcceptsClientTLS
			if tc.server {
				check = grpcAcceptsServerTLS
			}
			err := check(tc.ts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error about %q", err, tc.want)
			}
		})
	}
	// And what the generators build passes.
	if err := grpcAcceptsServerTLS(newServerMTLS()); err != nil {
		t.Errorf("the generated server context: %v", err)
	}
	ts, err := clientMTLS([]string{"spiffe://cluster.local/ns/a/sa/b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := grpcAcceptsClientTLS(ts); err != nil {
		t.Errorf("the generated client context: %v", err)
	}
}
