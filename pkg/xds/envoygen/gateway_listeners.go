package envoygen

import (
	"slices"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsinspector "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

const tlsInspectorListenerFilter = "envoy.filters.listener.tls_inspector"

// gatewayListenersKey caches the gateway's listeners per push context.
type gatewayListenersKey struct{}

// gatewayListeners returns the gateway's listeners, sorted by name: the
// HTTP one when the gateway Service has an HTTP port, and the HTTPS one
// when it has an HTTPS port and some TLS entry is usable. They depend only
// on the ports and the filter chains, so a push that changes neither (most
// Ingress changes: paths, backends) reuses the previous push's listeners.
func (g *ListenerGenerator) gatewayListeners(gen *lrGeneration, push *pushcontext.PushContext, gw *pushcontext.IngressGateway) (model.Resources, error) {
	v, err := gen.get(gatewayListenersKey{}, func() (any, error) {
		chains := gatewayChains(gw, lrProblems{logger: g.opts.Logger, push: push}.report)
		sig := gatewayListenerSignature(gw, chains)
		g.gatewayMu.Lock()
		prev := g.gatewayPrev
		g.gatewayMu.Unlock()
		if prev.resources != nil && prev.signature == sig {
			return prev.resources, nil
		}
		out := model.Resources{}
		if gw.HTTPPort != 0 {
			res, err := g.gatewayHTTPListener(gw.HTTPPort)
			if err != nil {
				return nil, err
			}
			out = append(out, res)
		}
		if len(chains) > 0 {
			res, err := g.gatewayHTTPSListener(gw.HTTPSPort, chains)
			if err != nil {
				return nil, err
			}
			out = append(out, res)
		}
		slices.SortFunc(out, func(a, b model.Resource) int { return strings.Compare(a.Name, b.Name) })
		g.gatewayMu.Lock()
		g.gatewayPrev = builtGatewayListeners{signature: sig, resources: out}
		g.gatewayMu.Unlock()
		return out, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(model.Resources), nil
}

// builtGatewayListeners are the last gateway listeners built, with what
// they were built from.
type builtGatewayListeners struct {
	signature string
	resources model.Resources
}

// gatewayListenerSignature is everything the gateway's listeners depend on.
func gatewayListenerSignature(gw *pushcontext.IngressGateway, chains []gatewayChain) string {
	var b strings.Builder
	b.WriteString(strconv.FormatUint(uint64(gw.HTTPPort), 10))
	b.WriteByte('|')
	b.WriteString(strconv.FormatUint(uint64(gw.HTTPSPort), 10))
	for _, c := range chains {
		b.WriteByte('|')
		b.WriteString(c.routeName)
		b.WriteByte(0)
		b.WriteString(c.secretName)
		for _, n := range c.serverNames {
			b.WriteByte(0)
			b.WriteString(n)
		}
	}
	return b.String()
}

// gatewayConnectionManager is the HCM of a gateway listener or chain. A
// gateway is the edge: unlike a sidecar it trusts the address it sees the
// client at. Its route configurations ignore the port of the Host header
// (routeConfigurationHead), since clients reach the gateway through its Service
// (and load balancers, node ports) on ports it cannot know; the header
// itself goes to the backend as the client sent it, as from Istio's
// gateways, so that a backend that writes absolute URLs keeps the port.
func (g *ListenerGenerator) gatewayConnectionManager(statPrefix, routeName string) (*anypb.Any, error) {
	m := &hcm.HttpConnectionManager{
		CodecType:  hcm.HttpConnectionManager_AUTO,
		StatPrefix: statPrefix,
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			ConfigSource:    adsRouteSource(),
			RouteConfigName: routeName,
		}},
		HttpFilters: g.httpFilters,
	}
	applyMeshHTTPDefaults(m)
	m.UseRemoteAddress = wrapperspb.Bool(true)
	return packLR(m)
}

func gatewayListener(port uint32) *listener.Listener {
	name := outboundListenerName(wildcardAddress, port)
	return &listener.Listener{
		Name:             name,
		Address:          socketAddress(wildcardAddress, port),
		TrafficDirection: core.TrafficDirection_OUTBOUND,
	}
}

func (g *ListenerGenerator) gatewayHTTPListener(port uint32) (model.Resource, error) {
	l := gatewayListener(port)
	manager, err := g.gatewayConnectionManager("outbound_"+l.Name, GatewayHTTPRouteName(port))
	if err != nil {
		return model.Resource{}, err
	}
	l.FilterChains = []*listener.FilterChain{{Filters: []*listener.Filter{networkFilter(httpConnectionManagerFilter, manager)}}}
	return packResourceLR(l.Name, l)
}

// gatewayHTTPSListener terminates TLS: the TLS inspector reads the SNI name,
// which picks the chain, whose certificate comes over SDS.
func (g *ListenerGenerator) gatewayHTTPSListener(port uint32, chains []gatewayChain) (model.Resource, error) {
	l := gatewayListener(port)
	l.ListenerFilters = []*listener.ListenerFilter{{
		Name:       tlsInspectorListenerFilter,
		ConfigType: &listener.ListenerFilter_TypedConfig{TypedConfig: g.tlsInspector},
	}}
	for _, c := range chains {
		manager, err := g.gatewayConnectionManager("outbound_"+l.Name, c.routeName)
		if err != nil {
			return model.Resource{}, err
		}
		tlsContext, err := packLR(downstreamTLS(c.secretName))
		if err != nil {
			return model.Resource{}, err
		}
		fc := &listener.FilterChain{
			Filters: []*listener.Filter{networkFilter(httpConnectionManagerFilter, manager)},
			TransportSocket: &core.TransportSocket{
				Name:       transportSocketTLS,
				ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: tlsContext},
			},
		}
		if c.serverNames != nil {
			fc.FilterChainMatch = &listener.FilterChainMatch{ServerNames: c.serverNames}
		}
		l.FilterChains = append(l.FilterChains, fc)
	}
	return packResourceLR(l.Name, l)
}

// downstreamTLS serves the certificate of one Secret, by SDS over ADS, to
// HTTP/2 and HTTP/1.1 clients, TLS 1.2 at least (Istio's gateway default).
func downstreamTLS(secretName string) *tlsv3.DownstreamTlsContext {
	return &tlsv3.DownstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsParams:                      &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2},
		AlpnProtocols:                  []string{"h2", "http/1.1"},
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{adsSecret(secretName)},
	}}
}

func newTLSInspectorConfig() *anypb.Any { return mustPackLR(&tlsinspector.TlsInspector{}) }
