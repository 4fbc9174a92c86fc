package envoygen

import (
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	originaldst "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	tcp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/pkg/model"
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

// newOriginalDstConfig is the (empty) original_dst listener filter config.
func newOriginalDstConfig() *originaldst.OriginalDst { return &originaldst.OriginalDst{} }
