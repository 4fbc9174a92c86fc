package grpcgen

import (
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// An ExternalName Service is a DNS service (see envoygen's cluster_dns.go):
// its clients reach the external name on the service port. grpc-go takes
// such a cluster as LOGICAL_DNS (gRFC A37): a load assignment of exactly
// one locality with exactly one endpoint, the name and port, which it
// resolves with its own DNS resolver, and no EDS (xdsresource's
// dnsHostNameFromCluster, grpc-go v1.85).

// setDiscovery makes c an EDS cluster fetching its own name over ADS, or
// for a DNS service a LOGICAL_DNS cluster of its name on port (a subset's
// labels select Pods, which the name has none of: every subset resolves it).
func setDiscovery(c *cluster.Cluster, svc *model.Service, port uint32) {
	if !svc.IsExternalName() {
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_EDS}
		c.EdsClusterConfig = &cluster.Cluster_EdsClusterConfig{EdsConfig: adsConfigSource(), ServiceName: c.GetName()}
		return
	}
	c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_LOGICAL_DNS}
	c.LoadAssignment = &endpoint.ClusterLoadAssignment{
		ClusterName: c.GetName(),
		Endpoints: []*endpoint.LocalityLbEndpoints{{
			LbEndpoints: []*endpoint.LbEndpoint{{
				HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
					Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
						Address:       svc.ExternalName,
						PortSpecifier: &core.SocketAddress_PortValue{PortValue: port},
					}}},
				}},
			}},
		}},
	}
}
