package envoygen

import (
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// Transport protocols as the TLS inspector reports them.
const (
	transportTLS       = "tls"
	transportRawBuffer = "raw_buffer"
)

// istioALPNs are what Istio's clients offer over mutual TLS: "istio" and
// "istio-peer-exchange" for TCP, istio-http/* and istio-h2 for HTTP (the
// client side rewrites the application's ALPN). A TLS connection offering
// none of them is the application's own TLS, not the mesh's.
var istioALPNs = []string{"istio", "istio-peer-exchange", "istio-http/1.0", "istio-http/1.1", "istio-h2"}

// inboundWay is one way into a port that its mTLS mode admits: a filter
// chain match, and whether the chain terminates the mesh's mutual TLS.
type inboundWay struct {
	suffix    string // appended to the port's chain name
	transport string
	alpn      []string
	terminate bool
}

func (w inboundWay) name(base string) string { return base + w.suffix }

func (w inboundWay) match(port *wrapperspb.UInt32Value) *listener.FilterChainMatch {
	if port == nil && w.transport == "" && len(w.alpn) == 0 {
		return nil
	}
	return &listener.FilterChainMatch{DestinationPort: port, TransportProtocol: w.transport, ApplicationProtocols: w.alpn}
}

var (
	mtlsWay = inboundWay{suffix: "-mtls", transport: transportTLS, alpn: istioALPNs, terminate: true}
	// strictWay takes every TLS connection: under STRICT nothing else may
	// come in, so there is no ALPN to tell apart.
	strictWay    = inboundWay{suffix: "-mtls", transport: transportTLS, terminate: true}
	plaintextWay = inboundWay{transport: transportRawBuffer}
	// appTLSWay is the application's own TLS on a TCP port, passed through.
	appTLSWay = inboundWay{suffix: "-tls", transport: transportTLS}
	// anyWay matches whatever comes: under DISABLE the sidecar reads no
	// TLS, so the application's own TLS passes like any other bytes.
	anyWay = inboundWay{}
)

// inboundWays are the chains of one port (or of the passthrough) by mode,
// as Istio builds them. Envoy matches the most specific transport
// protocol first and never backtracks (FilterChainMatch in
// listener_components.proto), so under PERMISSIVE a TCP port needs its
// own chain for TLS without Istio's ALPN, or such connections would find
// none; an HTTP port expects no TLS but the mesh's.
func inboundWays(mode model.MTLSMode, http bool) []inboundWay {
	switch mode {
	case model.MTLSStrict:
		return []inboundWay{strictWay}
	case model.MTLSDisable:
		return []inboundWay{anyWay}
	}
	if http {
		return []inboundWay{mtlsWay, plaintextWay}
	}
	return []inboundWay{mtlsWay, appTLSWay, plaintextWay}
}

// inboundTLS terminates the mesh's mutual TLS: the workload's certificate
// and the mesh root from the local agent over SDS ("default", "ROOTCA"),
// and a client certificate required and checked against that root. Which
// peers may call is authorization's business, so no SAN is matched.
func (g *ListenerGenerator) inboundTLS(http bool) *core.TransportSocket {
	ctx := g.inboundTLSTCP
	if http {
		ctx = g.inboundTLSHTTP
	}
	return &core.TransportSocket{Name: transportSocketTLS, ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: ctx}}
}

func newInboundTLSContext(http bool) *anypb.Any {
	common := &tlsv3.CommonTlsContext{
		TlsParams: &tlsv3.TlsParameters{
			TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2,
			TlsMaximumProtocolVersion: tlsv3.TlsParameters_TLSv1_3,
		},
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{agentSecret(workloadCertSecret)},
		ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{
			CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         &tlsv3.CertificateValidationContext{},
				ValidationContextSdsSecretConfig: agentSecret(workloadRootSecret),
			},
		},
	}
	if http {
		// What the server selects from the client's offer: HTTP/2 or
		// HTTP/1.1 for the connection manager's codec.
		common.AlpnProtocols = []string{"h2", "http/1.1"}
	}
	return mustPackLR(&tlsv3.DownstreamTlsContext{
		CommonTlsContext:         common,
		RequireClientCertificate: wrapperspb.Bool(true),
	})
}
