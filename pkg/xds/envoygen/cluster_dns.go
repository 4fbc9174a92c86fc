package envoygen

import (
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// An ExternalName Service is a DNS service, as Istio made it before its
// services became aliases (1.21): cluster DNS answers the service's
// hostname with a CNAME, so before the mesh its clients reached the
// external name on the port they dialled. Its clusters do the same. They
// are STRICT_DNS, resolving the name (every address it has is an
// endpoint) on the service port: Kubernetes ignores an ExternalName
// Service's targetPort, and so does Istio. They fetch nothing over EDS,
// and a DestinationRule applies to them as to any cluster. A subset's
// labels select Pods, and the name has none, so a subset cluster resolves
// the same name.

// dnsLookupFamily is the address family DNS clusters resolve. A cluster
// is shared by every proxy, whatever its addresses, so it cannot follow
// the proxy's family as Istio's does (IPv4 only for an IPv4 pod). IPv4
// first gives IPv4 pods, the common case, addresses they can reach, where
// Envoy's default (AUTO) prefers IPv6; a name with only IPv6 addresses
// still resolves.
const dnsLookupFamily = cluster.Cluster_V4_PREFERRED

// resolveExternalName makes the STRICT_DNS cluster resolve o's external
// name on the service port.
func (b *clusterBuilder) resolveExternalName(o outboundCluster) {
	b.c.DnsLookupFamily = dnsLookupFamily
	b.c.LoadAssignment = &endpoint.ClusterLoadAssignment{
		ClusterName: b.c.GetName(),
		Endpoints: []*endpoint.LocalityLbEndpoints{{
			// One locality, weighted: a localityLbSetting turns on
			// locality-weighted balancing, which sends nothing to a
			// locality without a weight.
			LoadBalancingWeight: wrapperspb.UInt32(1),
			LbEndpoints: []*endpoint.LbEndpoint{{
				HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
					Address: clusterSocketAddress(o.svc.ExternalName, o.port.Port),
				}},
			}},
		}},
	}
}

// externalSNI is the server name TLS origination to an external name sends
// when the rule names none, without the trailing dot of an absolute name
// (SNI carries none, RFC 6066 section 3); "" for other services. Envoy's
// auto SNI would send the request's Host, the service's own hostname,
// which the external server's certificate does not name.
func externalSNI(svc *model.Service) string {
	return strings.TrimSuffix(svc.ExternalName, ".")
}
