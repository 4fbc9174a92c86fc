package envoygen

import (
	"slices"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// inboundChain is one port the proxy's workload serves.
type inboundChain struct {
	targetPort  uint32 // where traffic arrives, and the inbound cluster's port
	servicePort uint32
	http        bool
	host        string // the first service (by hostname) exposing the port
	// mode is the port's mutual TLS, from the PeerAuthentications.
	mode model.MTLSMode
	// passthrough marks a port that no service exposes but a port-level
	// PeerAuthentication names: it forwards to the original destination,
	// under that port's mode.
	passthrough bool
}

// inboundPorts is everything virtualInbound depends on.
type inboundPorts struct {
	chains []inboundChain
	// mode applies to ports no chain names (the passthrough chains).
	mode model.MTLSMode
}

// inboundChainsFor lists the proxy's own ports: one per distinct target port
// of the services that select its workload, sorted by target port, then
// the ports only a port-level PeerAuthentication names. When several
// service ports share a target port, the first service by hostname
// decides, as in Istio.
func inboundChainsFor(push *pushcontext.PushContext, proxy *model.Proxy) inboundPorts {
	w := push.WorkloadForProxy(proxy)
	if w == nil {
		// Without its Pod the proxy's labels are all there is to select
		// it: Istio applies the policies to the proxy as it stands.
		return inboundPorts{mode: push.InboundMTLS(proxy.Namespace, proxy.Labels).Mode}
	}
	policy := push.InboundMTLS(w.Namespace, w.Labels)
	var chains []inboundChain
	for _, svc := range push.ServiceTargets(w) {
		for _, p := range svc.Ports {
			// The same resolution as the inbound clusters' (cds.go), so
			// that every chain finds its cluster.
			target := targetPort(push, svc, p, w)
			if target == 0 || reservedListenerPort(target) {
				continue
			}
			if slices.ContainsFunc(chains, func(c inboundChain) bool { return c.targetPort == target }) {
				continue
			}
			chains = append(chains, inboundChain{
				targetPort: target, servicePort: p.Port, http: p.Protocol.IsHTTP(), host: svc.Hostname,
				mode: policy.ForPort(target),
			})
		}
	}
	for _, p := range policy.Ports {
		if reservedListenerPort(p.Port) || slices.ContainsFunc(chains, func(c inboundChain) bool { return c.targetPort == p.Port }) {
			continue
		}
		chains = append(chains, inboundChain{targetPort: p.Port, mode: p.Mode, passthrough: true})
	}
	slices.SortFunc(chains, func(a, b inboundChain) int { return int(a.targetPort) - int(b.targetPort) })
	return inboundPorts{chains: chains, mode: policy.Mode}
}

// signature identifies what virtualInbound depends on, so proxies whose
// workloads expose the same ports under the same modes share one.
func (in inboundPorts) signature() string {
	var b strings.Builder
	b.WriteString(in.mode.String())
	b.WriteByte(0)
	for _, c := range in.chains {
		b.WriteString(strconv.FormatUint(uint64(c.targetPort), 10))
		b.WriteByte('/')
		b.WriteString(strconv.FormatUint(uint64(c.servicePort), 10))
		switch {
		case c.passthrough:
			b.WriteString("/p/")
		case c.http:
			b.WriteString("/h/")
		default:
			b.WriteString("/t/")
		}
		b.WriteString(c.mode.String())
		b.WriteByte('/')
		b.WriteString(c.host)
		b.WriteByte(0)
	}
	return b.String()
}

// buildVirtualInbound is the listener iptables redirects inbound traffic to.
// The original_dst listener filter restores the port the client dialled,
// and the TLS inspector tells TLS (with its ALPN) from plaintext; chains
// per own port, one per way in that port's mTLS mode admits, forward to
// that port's inbound cluster, and anything else passes through to its
// original destination under the workload's mode.
func (g *ListenerGenerator) buildVirtualInbound(in inboundPorts) (model.Resource, error) {
	filterChains := make([]*listener.FilterChain, 0, 2*len(in.chains)+3)
	blackhole, err := tcpProxyChain(virtualInboundBlackholeChain, BlackHoleCluster, destinationPortMatch(VirtualInboundPort))
	if err != nil {
		return model.Resource{}, err
	}
	filterChains = append(filterChains, blackhole)
	for _, c := range in.chains {
		fcs, err := g.inboundFilterChains(c)
		if err != nil {
			return model.Resource{}, err
		}
		filterChains = append(filterChains, fcs...)
	}
	passthrough, err := g.passthroughChains(virtualInboundPassthroughChain, nil, in.mode)
	if err != nil {
		return model.Resource{}, err
	}
	filterChains = append(filterChains, passthrough...)
	return packResourceLR(VirtualInboundListener, &listener.Listener{
		Name:    VirtualInboundListener,
		Address: socketAddress(wildcardAddress, VirtualInboundPort),
		ListenerFilters: []*listener.ListenerFilter{
			{Name: originalDstListenerFilter, ConfigType: &listener.ListenerFilter_TypedConfig{TypedConfig: g.originalDstConfig}},
			{Name: tlsInspectorListenerFilter, ConfigType: &listener.ListenerFilter_TypedConfig{TypedConfig: g.tlsInspector}},
		},
		// A server-first protocol (MySQL, SMTP) sends nothing for the TLS
		// inspector to read; after the timeout the connection goes on as
		// plaintext instead of being closed, as in Istio.
		ContinueOnListenerFiltersTimeout: true,
		FilterChains:                     filterChains,
		TrafficDirection:                 core.TrafficDirection_INBOUND,
	})
}

// inboundFilterChains are a port's chains: one per way in that its mode
// admits (inbound_mtls.go says which).
func (g *ListenerGenerator) inboundFilterChains(c inboundChain) ([]*listener.FilterChain, error) {
	name := outboundListenerName(wildcardAddress, c.targetPort) // Istio names inbound chains the same way
	if c.passthrough {
		return g.passthroughChains(name, wrapperspb.UInt32(c.targetPort), c.mode)
	}
	ways := inboundWays(c.mode, c.http)
	out := make([]*listener.FilterChain, 0, len(ways))
	for _, way := range ways {
		fc, err := g.inboundFilterChain(c, way.name(name))
		if err != nil {
			return nil, err
		}
		fc.FilterChainMatch = way.match(wrapperspb.UInt32(c.targetPort))
		if way.terminate {
			fc.TransportSocket = g.inboundTLS(c.http)
		}
		out = append(out, fc)
	}
	return out, nil
}

// passthroughChains forward to the original destination under mode;
// port, when set, narrows them to one destination port.
func (g *ListenerGenerator) passthroughChains(name string, port *wrapperspb.UInt32Value, mode model.MTLSMode) ([]*listener.FilterChain, error) {
	ways := inboundWays(mode, false)
	out := make([]*listener.FilterChain, 0, len(ways))
	for _, way := range ways {
		fc, err := tcpProxyChain(way.name(name), InboundPassthroughCluster, way.match(port))
		if err != nil {
			return nil, err
		}
		if way.terminate {
			fc.TransportSocket = g.inboundTLS(false)
		}
		out = append(out, fc)
	}
	return out, nil
}

func (g *ListenerGenerator) inboundFilterChain(c inboundChain, name string) (*listener.FilterChain, error) {
	cluster := InboundClusterName(c.targetPort)
	if !c.http {
		return tcpProxyChain(name, cluster, nil)
	}
	manager := &hcm.HttpConnectionManager{
		CodecType:  hcm.HttpConnectionManager_AUTO,
		StatPrefix: "inbound_" + outboundListenerName(wildcardAddress, c.targetPort),
		RouteSpecifier: &hcm.HttpConnectionManager_RouteConfig{RouteConfig: &route.RouteConfiguration{
			Name: cluster,
			VirtualHosts: []*route.VirtualHost{{
				Name:    "inbound|http|" + strconv.FormatUint(uint64(c.servicePort), 10),
				Domains: []string{"*"},
				Routes:  []*route.Route{inboundDefaultRoute(cluster, traceOperation(c.host, c.servicePort))},
			}},
			ValidateClusters: wrapperspb.Bool(false),
		}},
		HttpFilters:              g.httpFilters,
		ServerName:               inboundServerName,
		ForwardClientCertDetails: hcm.HttpConnectionManager_APPEND_FORWARD,
		SetCurrentClientCertDetails: &hcm.HttpConnectionManager_SetCurrentClientCertDetails{
			Subject: wrapperspb.Bool(true), Dns: true, Uri: true,
		},
	}
	applyMeshHTTPDefaults(manager)
	managerAny, err := packLR(manager)
	if err != nil {
		return nil, err
	}
	return &listener.FilterChain{
		Name:    name,
		Filters: []*listener.Filter{networkFilter(httpConnectionManagerFilter, managerAny)},
	}, nil
}
