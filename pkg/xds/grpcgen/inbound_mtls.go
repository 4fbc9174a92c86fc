package grpcgen

import (
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// inboundPolicy is the mutual TLS a gRPC server's inbound listeners serve,
// resolved once per generation from the PeerAuthentications that select the
// server (its namespace and labels).
type inboundPolicy struct {
	policy pushcontext.MTLSPolicy
	// labelledForMTLS is set when the pod carries
	// security.istio.io/tlsMode=istio.
	labelledForMTLS bool
}

func newInboundPolicy(push *pushcontext.PushContext, proxy *model.Proxy) *inboundPolicy {
	return &inboundPolicy{
		policy:          push.InboundMTLS(proxy.Namespace, proxy.Labels),
		labelledForMTLS: model.LabelledForMTLS(proxy.Labels),
	}
}

// mode is what the server on port serves: STRICT or plaintext.
//
// grpc-go's filter chain match can tell neither TLS from plaintext nor one
// ALPN from another (gRFC A36: transport_protocol "raw_buffer" only), so a
// listener cannot offer both, and PERMISSIVE is served as plaintext, as
// Istio's gRPC generator serves it. Except, as in Istio, on a pod labelled
// security.istio.io/tlsMode=istio: the label says the server uses xDS
// credentials, and sidecars' auto mTLS sends it mutual TLS, which a
// plaintext listener would refuse.
func (p *inboundPolicy) mode(port uint32) model.MTLSMode {
	mode := p.policy.ForPort(port)
	if mode == model.MTLSPermissive && p.labelledForMTLS {
		return model.MTLSStrict
	}
	if mode != model.MTLSStrict {
		return model.MTLSDisable
	}
	return mode
}

// serverTransportSocket is nil for plaintext: grpc-go then uses the server
// credentials' fallback.
func (g *ListenerGenerator) serverTransportSocket(mode model.MTLSMode) *core.TransportSocket {
	if mode == model.MTLSStrict {
		return g.serverMTLS
	}
	return nil
}
