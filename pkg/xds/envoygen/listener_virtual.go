package envoygen

import (
	"slices"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	originaldst "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// Filter chain names Istio gives the virtual listeners' fixed chains.
const (
	virtualOutboundBlackholeChain = "virtualOutbound-blackhole"
	virtualOutboundCatchAllChain  = "virtualOutbound-catchall-tcp"
	virtualInboundBlackholeChain  = "virtualInbound-blackhole"
	// Istio names the inbound TCP passthrough chain after the listener.
	virtualInboundPassthroughChain = VirtualInboundListener
	inboundServerName              = "istio-envoy"
)

// tcpProxyChain is a filter chain that sends every connection to cluster,
// with the cluster name as the stat prefix (Istio's convention).
func tcpProxyChain(name, cluster string, match *listener.FilterChainMatch) (*listener.FilterChain, error) {
	proxyAny, err := packLR(&tcp.TcpProxy{StatPrefix: cluster, ClusterSpecifier: &tcp.TcpProxy_Cluster{Cluster: cluster}})
	if err != nil {
		return nil, err
	}
	return &listener.FilterChain{
		Name:             name,
		FilterChainMatch: match,
		Filters:          []*listener.Filter{networkFilter(tcpProxyFilter, proxyAny)},
	}, nil
}

func destinationPortMatch(port uint32) *listener.FilterChainMatch {
	return &listener.FilterChainMatch{DestinationPort: wrapperspb.UInt32(port)}
}

// buildVirtualOutbound is the listener iptables redirects outbound traffic
// to. use_original_dst makes Envoy restore the original destination (it
// installs the original_dst listener filter itself) and hand the connection
// to the per-port listener for that address; what matches none goes out
// unchanged through PassthroughCluster (Istio's ALLOW_ANY default). A
// connection addressed to 15001 itself would loop, so it is dropped.
func buildVirtualOutbound() (model.Resource, error) {
	blackhole, err := tcpProxyChain(virtualOutboundBlackholeChain, BlackHoleCluster, destinationPortMatch(VirtualOutboundPort))
	if err != nil {
		return model.Resource{}, err
	}
	passthrough, err := tcpProxyChain(virtualOutboundCatchAllChain, PassthroughCluster, nil)
	if err != nil {
		return model.Resource{}, err
	}
	return packResourceLR(VirtualOutboundListener, &listener.Listener{
		Name:             VirtualOutboundListener,
		Address:          socketAddress(wildcardAddress, VirtualOutboundPort),
		FilterChains:     []*listener.FilterChain{blackhole, passthrough},
		UseOriginalDst:   wrapperspb.Bool(true),
		TrafficDirection: core.TrafficDirection_OUTBOUND,
	})
}

// inboundChain is one port the proxy's workload serves.
type inboundChain struct {
	targetPort  uint32 // where traffic arrives, and the inbound cluster's port
	servicePort uint32
	http        bool
	host        string // the first service (by hostname) exposing the port
}

// inboundChains lists the proxy's own ports: one per distinct target port of
// the services that select its workload, sorted by target port. When
// several service ports share a target port, the first service by hostname
// decides, as in Istio.
func inboundChains(push *pushcontext.PushContext, proxy *model.Proxy) []inboundChain {
	w := push.WorkloadForProxy(proxy)
	if w == nil {
		return nil
	}
	var chains []inboundChain
	for _, svc := range push.ServiceTargets(w) {
		for _, p := range svc.Ports {
			if p.Protocol == model.ProtocolUDP {
				continue
			}
			// The same resolution as the inbound clusters' (cds.go), so
			// that every chain finds its cluster.
			target := targetPort(push, svc, p, w)
			if target == 0 || reservedListenerPort(target) {
				continue
			}
			if slices.ContainsFunc(chains, func(c inboundChain) bool { return c.targetPort == target }) {
				continue
			}
			chains = append(chains, inboundChain{targetPort: target, servicePort: p.Port, http: p.Protocol.IsHTTP(), host: svc.Hostname})
		}
	}
	slices.SortFunc(chains, func(a, b inboundChain) int { return int(a.targetPort) - int(b.targetPort) })
	return chains
}

// inboundSignature identifies what virtualInbound depends on, so proxies
// whose workloads expose the same ports share one.
func inboundSignature(chains []inboundChain) string {
	var b strings.Builder
	for _, c := range chains {
		b.WriteString(strconv.FormatUint(uint64(c.targetPort), 10))
		b.WriteByte('/')
		b.WriteString(strconv.FormatUint(uint64(c.servicePort), 10))
		if c.http {
			b.WriteString("/h/")
		} else {
			b.WriteString("/t/")
		}
		b.WriteString(c.host)
		b.WriteByte(0)
	}
	return b.String()
}

// buildVirtualInbound is the listener iptables redirects inbound traffic to.
// The original_dst listener filter restores the port the client dialled;
// a chain per own port forwards to that port's inbound cluster, and
// anything else passes through to its original destination.
func (g *ListenerGenerator) buildVirtualInbound(chains []inboundChain) (model.Resource, error) {
	filterChains := make([]*listener.FilterChain, 0, len(chains)+2)
	blackhole, err := tcpProxyChain(virtualInboundBlackholeChain, BlackHoleCluster, destinationPortMatch(VirtualInboundPort))
	if err != nil {
		return model.Resource{}, err
	}
	filterChains = append(filterChains, blackhole)
	for _, c := range chains {
		fc, err := g.inboundFilterChain(c)
		if err != nil {
			return model.Resource{}, err
		}
		filterChains = append(filterChains, fc)
	}
	passthrough, err := tcpProxyChain(virtualInboundPassthroughChain, InboundPassthroughCluster, nil)
	if err != nil {
		return model.Resource{}, err
	}
	filterChains = append(filterChains, passthrough)
	return packResourceLR(VirtualInboundListener, &listener.Listener{
		Name:    VirtualInboundListener,
		Address: socketAddress(wildcardAddress, VirtualInboundPort),
		ListenerFilters: []*listener.ListenerFilter{{
			Name:       originalDstListenerFilter,
			ConfigType: &listener.ListenerFilter_TypedConfig{TypedConfig: g.originalDstConfig},
		}},
		FilterChains:     filterChains,
		TrafficDirection: core.TrafficDirection_INBOUND,
	})
}

func (g *ListenerGenerator) inboundFilterChain(c inboundChain) (*listener.FilterChain, error) {
	name := outboundListenerName(wildcardAddress, c.targetPort) // Istio names inbound chains the same way
	cluster := InboundClusterName(c.targetPort)
	match := destinationPortMatch(c.targetPort)
	if !c.http {
		return tcpProxyChain(name, cluster, match)
	}
	manager := &hcm.HttpConnectionManager{
		CodecType:  hcm.HttpConnectionManager_AUTO,
		StatPrefix: "inbound_" + name,
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
		Name:             name,
		FilterChainMatch: match,
		Filters:          []*listener.Filter{networkFilter(httpConnectionManagerFilter, managerAny)},
	}, nil
}

// newOriginalDstConfig is the (empty) original_dst listener filter config.
func newOriginalDstConfig() *originaldst.OriginalDst { return &originaldst.OriginalDst{} }
