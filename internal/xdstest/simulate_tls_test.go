package xdstest

import (
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The simulation's TLS model, on hand-written configuration: transport
// protocol and ALPN matching without backtracking (FilterChainMatch),
// client certificates (DownstreamTlsContext.require_client_certificate),
// and the transport socket match per endpoint (Cluster.transport_socket_matches).
func TestSimulationInboundTLS(t *testing.T) {
	terminate := func(fc *listener.FilterChain, requireCert bool) *listener.FilterChain {
		fc.TransportSocket = &core.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &core.TransportSocket_TypedConfig{
			TypedConfig: packed(t, &tlsv3.DownstreamTlsContext{RequireClientCertificate: wrapperspb.Bool(requireCert)}),
		}}
		return fc
	}
	port := wrapperspb.UInt32(8080)
	in := &listener.Listener{
		Name:             "in",
		Address:          addr("0.0.0.0", 15006),
		TrafficDirection: core.TrafficDirection_INBOUND,
		FilterChains: []*listener.FilterChain{
			terminate(tcpChain(t, "mtls", "app", &listener.FilterChainMatch{DestinationPort: port, TransportProtocol: "tls", ApplicationProtocols: []string{"istio"}}), true),
			tcpChain(t, "plain", "app", &listener.FilterChainMatch{DestinationPort: port, TransportProtocol: "raw_buffer"}),
			terminate(tcpChain(t, "strict-9090", "app", &listener.FilterChainMatch{DestinationPort: wrapperspb.UInt32(9090), TransportProtocol: "tls"}), true),
			tcpChain(t, "any", "app", nil),
		},
	}
	appCluster, cla := staticCluster("app", group(0, 0, host("10.0.0.1", core.HealthStatus_HEALTHY)))
	sim, err := NewSimulation(in, appCluster, cla)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string
		req        Request
		outcome    Outcome
		chain      string
		terminated bool
	}{
		{"mutual TLS with Istio's ALPN", Request{TLS: true, ALPN: []string{"h2", "istio"}, ClientCertificate: true}, OutcomeRouted, "mtls", true},
		{"plaintext", Request{}, OutcomeRouted, "plain", false},
		// The port's chains match; none takes TLS without the ALPN, and
		// Envoy does not fall back to the port-less chain.
		{"TLS without the ALPN finds no chain", Request{TLS: true, ALPN: []string{"h2"}}, OutcomeNoListener, "", false},
		{"a certificate is required", Request{TLS: true, ALPN: []string{"istio"}}, OutcomeTLSRefused, "mtls", false},
		{"plaintext to a TLS-only port", Request{Port: 9090}, OutcomeNoListener, "", false},
		{"another port takes the catch-all", Request{Port: 7000, TLS: true}, OutcomeRouted, "any", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.Inbound, req.DestinationIP = true, "10.0.0.1"
			if req.Port == 0 {
				req.Port = 8080
			}
			r := sim.Route(req)
			if r.Outcome != tc.outcome || r.FilterChain != tc.chain || r.TLSTerminated != tc.terminated {
				t.Errorf("got %s via %q (terminated %v), want %s via %q (terminated %v): %s",
					r.Outcome, r.FilterChain, r.TLSTerminated, tc.outcome, tc.chain, tc.terminated, r.Detail)
			}
		})
	}
}

func TestSimulationTransportSocketMatch(t *testing.T) {
	meta := func(mode string) *core.Metadata {
		return &core.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"envoy.transport_socket_match": {Fields: map[string]*structpb.Value{"tlsMode": structpb.NewStringValue(mode)}},
		}}
	}
	labelled := host("10.0.0.1", core.HealthStatus_HEALTHY)
	labelled.Metadata = meta("istio")
	other := host("10.0.0.2", core.HealthStatus_HEALTHY)
	other.Metadata = meta("disabled")
	bare := host("10.0.0.3", core.HealthStatus_HEALTHY)
	c, cla := staticCluster("auto", group(0, 0, labelled, other, bare))
	c.TransportSocketMatches = []*cluster.Cluster_TransportSocketMatch{
		{Name: "tlsMode-istio", Match: &structpb.Struct{Fields: map[string]*structpb.Value{"tlsMode": structpb.NewStringValue("istio")}}},
		{Name: "tlsMode-disabled", Match: &structpb.Struct{}},
	}
	single, singleCLA := staticCluster("single", group(0, 0, host("10.0.1.1", core.HealthStatus_HEALTHY)))
	single.TransportSocket = &core.TransportSocket{Name: "envoy.transport_sockets.tls"}
	plain, plainCLA := staticCluster("plain", group(0, 0, host("10.0.2.1", core.HealthStatus_HEALTHY)))
	// meshpilot's auto mTLS: the one match, and no catch-all after it.
	unlabelled := host("10.0.3.2", core.HealthStatus_HEALTHY)
	istioOnly, istioOnlyCLA := staticCluster("istio-only", group(0, 0, labelled, unlabelled))
	istioOnly.TransportSocketMatches = c.TransportSocketMatches[:1]
	// Original destination: no endpoints, so no endpoint metadata.
	origDst := &cluster.Cluster{Name: "orig-dst", ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST},
		TransportSocket: &core.TransportSocket{Name: "envoy.transport_sockets.tls"}}
	origDstMatches := &cluster.Cluster{Name: "orig-dst-matches", ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST},
		TransportSocketMatches: istioOnly.TransportSocketMatches}
	sim, err := NewSimulation(c, cla, single, singleCLA, plain, plainCLA, istioOnly, istioOnlyCLA, origDst, origDstMatches)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ cluster, address, want string }{
		{"auto", "10.0.0.1:80", "tlsMode-istio"},
		{"auto", "10.0.0.2:80", "tlsMode-disabled"},
		{"auto", "10.0.0.3:80", "tlsMode-disabled"},
		{"single", "10.0.1.1:80", "envoy.transport_sockets.tls"},
		{"plain", "10.0.2.1:80", "plaintext"},
		{"istio-only", "10.0.0.1:80", "tlsMode-istio"},
		{"istio-only", "10.0.3.2:80", "plaintext"},
		{"orig-dst", "10.0.4.1:80", "envoy.transport_sockets.tls"},
		// A match on tlsMode never applies to an original destination.
		{"orig-dst-matches", "10.0.0.1:80", "plaintext"},
	} {
		got, err := sim.TransportSocket(tc.cluster, tc.address)
		if err != nil || got != tc.want {
			t.Errorf("%s %s: %q, %v; want %q", tc.cluster, tc.address, got, err, tc.want)
		}
	}
	if _, err := sim.TransportSocket("auto", "10.9.9.9:80"); err == nil {
		t.Error("an endpoint the cluster does not have was given a transport socket")
	}
}
