package xdstest

import (
	"fmt"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
)

// Cluster resolves a cluster by name to the endpoints that receive traffic
// for req: for EDS its ClusterLoadAssignment, for static and DNS clusters
// their own, for ORIGINAL_DST the request's destination. Subset clusters,
// which no route of meshpilot's names, are checked this way.
func (s *Simulation) Cluster(name string, req Request) (Upstream, Outcome, string) {
	up := Upstream{Cluster: name}
	c := s.clusters[name]
	if c == nil {
		return up, OutcomeNoCluster, fmt.Sprintf("cluster %q was not sent", name)
	}
	up.Type, up.LbPolicy = c.GetType().String(), c.GetLbPolicy().String()
	var cla *endpoint.ClusterLoadAssignment
	switch c.GetType() {
	case cluster.Cluster_EDS:
		service := c.GetEdsClusterConfig().GetServiceName()
		if service == "" {
			service = name
		}
		if cla = s.assignments[service]; cla == nil {
			return up, OutcomeDangling, fmt.Sprintf("cluster %s waits for load assignment %q", name, service)
		}
	case cluster.Cluster_STATIC, cluster.Cluster_STRICT_DNS, cluster.Cluster_LOGICAL_DNS:
		cla = c.GetLoadAssignment()
	case cluster.Cluster_ORIGINAL_DST:
		if c.GetOriginalDstLbConfig().GetUseHttpHeader() {
			return up, OutcomeUnsupported, "original destination from an HTTP header"
		}
		// The connection's original destination is the one endpoint.
		up.Endpoints = []Endpoint{{Address: hostPortOf(req.DestinationIP, req.Port)}}
		return up, OutcomeRouted, ""
	default:
		return up, OutcomeUnsupported, fmt.Sprintf("cluster type %s", up.Type)
	}
	up.Endpoints, up.Panic = pickEndpoints(c, cla)
	if len(up.Endpoints) == 0 {
		return up, OutcomeNoHealthyUpstream, fmt.Sprintf("cluster %s has no endpoint to pick", name)
	}
	return up, OutcomeRouted, ""
}

// priorityLevel is one priority of a load assignment.
type priorityLevel struct {
	hosts, healthy []Endpoint
}

// pickEndpoints applies Envoy's priority levels
// (https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/upstream/load_balancing/priority)
// and panic threshold: a priority's health is its healthy share of hosts
// times the overprovisioning factor (1.4 unless the assignment says), at
// most 100%; priority 0 takes its health's worth of traffic, each next
// priority the rest up to its own health; when the healths sum below 100
// the loads are scaled up. A priority whose healthy share is below the
// panic threshold (50% unless the cluster says) while the total is below
// 100% is in panic: it sends to all its hosts. With no healthy host at
// all, everything goes to priority 0, in panic unless the threshold is 0.
// Within a priority under locality weighted load balancing
// (https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/upstream/load_balancing/locality_weight),
// a locality without a weight gets nothing
// (LocalityLbEndpoints.load_balancing_weight).
//
// Only HEALTHY and UNKNOWN hosts count as healthy; DEGRADED ones (which
// Envoy uses only after the healthy) are counted as unhealthy, since
// meshpilot never sends that status.
func pickEndpoints(c *cluster.Cluster, cla *endpoint.ClusterLoadAssignment) ([]Endpoint, bool) {
	weighted := c.GetCommonLbConfig().GetLocalityWeightedLbConfig() != nil
	var levels []priorityLevel
	for _, group := range cla.GetEndpoints() {
		weight := uint32(0)
		if weighted {
			weight = group.GetLoadBalancingWeight().GetValue()
		}
		p := group.GetPriority()
		for int(p) >= len(levels) {
			levels = append(levels, priorityLevel{})
		}
		for _, lb := range group.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			ep := Endpoint{Address: hostPortOf(sa.GetAddress(), sa.GetPortValue()), Priority: p, LocalityWeight: weight}
			levels[p].hosts = append(levels[p].hosts, ep)
			switch lb.GetHealthStatus() {
			case core.HealthStatus_HEALTHY, core.HealthStatus_UNKNOWN:
				levels[p].healthy = append(levels[p].healthy, ep)
			}
		}
	}
	factor := uint64(140)
	if f := cla.GetPolicy().GetOverprovisioningFactor(); f != nil {
		factor = uint64(f.GetValue())
	}
	threshold := 50.0
	if t := c.GetCommonLbConfig().GetHealthyPanicThreshold(); t != nil {
		threshold = t.GetValue()
	}
	health := make([]uint64, len(levels))
	total := uint64(0)
	for i, l := range levels {
		if len(l.hosts) > 0 {
			health[i] = min(100, factor*uint64(len(l.healthy))/uint64(len(l.hosts)))
		}
		total += health[i]
	}
	total = min(100, total)
	if total == 0 {
		if threshold == 0 || len(levels) == 0 {
			return nil, false
		}
		return pickable(levels[0].hosts, weighted), true
	}
	var out []Endpoint
	panicked := false
	remaining := uint64(100)
	for i, l := range levels {
		// Scaled by the normalized total, as Envoy does when it is below 100.
		load := min(remaining, health[i]*100/total)
		remaining -= load
		if load == 0 {
			continue
		}
		inPanic := total < 100 && float64(len(l.healthy))*100 < threshold*float64(len(l.hosts))
		if inPanic {
			panicked = true
			out = append(out, pickable(l.hosts, weighted)...)
			continue
		}
		out = append(out, pickable(l.healthy, weighted)...)
	}
	return out, panicked
}

// pickable drops the hosts of localities without a weight, which count
// towards their priority's health but get no load when locality weights
// are in use.
func pickable(eps []Endpoint, weighted bool) []Endpoint {
	if !weighted {
		return eps
	}
	var out []Endpoint
	for _, ep := range eps {
		if ep.LocalityWeight > 0 {
			out = append(out, ep)
		}
	}
	return out
}

// transportSocketMatchKey is the endpoint metadata that Envoy matches
// transport_socket_matches against.
const transportSocketMatchKey = "envoy.transport_socket_match"

// TransportSocket names how the proxy connects to one endpoint (ip:port) of
// an EDS cluster, or to any address through an ORIGINAL_DST cluster: the
// name of the transport socket match that applies (under auto mTLS,
// tlsMode-istio), else the name of the cluster's transport socket, else
// "plaintext".
func (s *Simulation) TransportSocket(clusterName, address string) (string, error) {
	c := s.clusters[clusterName]
	if c == nil {
		return "", fmt.Errorf("cluster %q was not sent", clusterName)
	}
	if c.GetType() == cluster.Cluster_ORIGINAL_DST {
		// Envoy makes a host of the connection's original destination with
		// no metadata (OriginalDstCluster), so only a match without fields
		// can take it; otherwise the cluster's own socket applies.
		return transportSocketFor(c, nil), nil
	}
	service := c.GetEdsClusterConfig().GetServiceName()
	if service == "" {
		service = clusterName
	}
	for _, group := range s.assignments[service].GetEndpoints() {
		for _, lb := range group.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			if hostPortOf(sa.GetAddress(), sa.GetPortValue()) == address {
				return transportSocketFor(c, lb), nil
			}
		}
	}
	return "", fmt.Errorf("cluster %s has no endpoint %s", clusterName, address)
}

// transportSocketFor names the transport socket Envoy uses towards one
// endpoint: the first of the cluster's transport_socket_matches whose
// every field the endpoint's envoy.transport_socket_match metadata holds
// with the same value (an empty match takes every endpoint), else the
// cluster's transport_socket (Cluster.transport_socket_matches,
// cluster.proto). It is the match's name, the socket's name, or
// "plaintext" when there is none.
func transportSocketFor(c *cluster.Cluster, lb *endpoint.LbEndpoint) string {
	meta := lb.GetMetadata().GetFilterMetadata()[transportSocketMatchKey].GetFields()
	for _, m := range c.GetTransportSocketMatches() {
		matched := true
		for k, want := range m.GetMatch().GetFields() {
			if got, ok := meta[k]; !ok || !proto.Equal(got, want) {
				matched = false
				break
			}
		}
		if matched {
			return m.GetName()
		}
	}
	if ts := c.GetTransportSocket(); ts != nil {
		return ts.GetName()
	}
	return "plaintext"
}
