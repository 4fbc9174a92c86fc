package envoygen

import (
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// inboundAddress is where a sidecar hands inbound traffic to its workload.
const inboundAddress = "127.0.0.1"

// passthroughIdleTimeout closes idle passthrough HTTP connections (Istio's).
const passthroughIdleTimeout = 5 * time.Minute

// inboundCluster names what an inbound cluster is built from; it is also
// its cache key.
type inboundCluster struct {
	// targetPort is the port the workload listens on.
	targetPort uint32
	port       *model.Port
	// rule is the DestinationRule of the service, of which only the
	// connection pool applies inbound (so the server side has the capacity
	// the clients were given), as in Istio.
	rule *pushcontext.DestinationRule
}

// buildInboundCluster sends traffic for one of the workload's own ports to
// the application on localhost.
func buildInboundCluster(in inboundCluster, drop problemReporter) *cluster.Cluster {
	name := InboundClusterName(in.targetPort)
	drop.cluster = name
	b := &clusterBuilder{
		c: &cluster.Cluster{
			Name:                 name,
			ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_STATIC},
			ConnectTimeout:       durationpb.New(defaultConnectTimeout),
			LoadAssignment: &endpoint.ClusterLoadAssignment{
				ClusterName: name,
				Endpoints: []*endpoint.LocalityLbEndpoints{{
					LbEndpoints: []*endpoint.LbEndpoint{{
						HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
							Address: clusterSocketAddress(inboundAddress, in.targetPort),
						}},
					}},
				}},
			},
		},
		drop: drop,
	}
	b.setUpstreamProtocol(in.port.Protocol, true)
	b.applyConnectionPool(in.rule.TrafficPolicy(in.port.Port, "").GetConnectionPool())
	return b.build()
}

func clusterSocketAddress(ip string, port uint32) *core.Address {
	return &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
		Address:       ip,
		PortSpecifier: &core.SocketAddress_PortValue{PortValue: port},
	}}}
}

// buildPassthroughCluster forwards to the original destination of the
// connection, speaking whichever HTTP version the client spoke.
func buildPassthroughCluster(name string) *cluster.Cluster {
	b := &clusterBuilder{c: &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST},
		ConnectTimeout:       durationpb.New(defaultConnectTimeout),
		LbPolicy:             cluster.Cluster_CLUSTER_PROVIDED,
	}}
	b.applyConnectionPool(nil)
	b.useDownstreamProtocol()
	b.commonHTTPOptions().IdleTimeout = durationpb.New(passthroughIdleTimeout)
	return b.build()
}

// buildInboundPassthroughCluster is the passthrough cluster for inbound
// traffic; its source address keeps iptables from capturing it again.
func buildInboundPassthroughCluster() *cluster.Cluster {
	c := buildPassthroughCluster(InboundPassthroughCluster)
	c.UpstreamBindConfig = &core.BindConfig{SourceAddress: &core.SocketAddress{
		Address:       InboundPassthroughBindIP,
		PortSpecifier: &core.SocketAddress_PortValue{PortValue: 0},
	}}
	return c
}

// buildBlackHoleCluster has no endpoints: what is routed there fails.
func buildBlackHoleCluster() *cluster.Cluster {
	return &cluster.Cluster{
		Name:                 BlackHoleCluster,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(defaultConnectTimeout),
		LbPolicy:             cluster.Cluster_ROUND_ROBIN,
	}
}
