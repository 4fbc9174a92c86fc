package grpcgen

import (
	"cmp"
	"slices"
	"sync"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// linearDedupLimit is the endpoint count up to which duplicates are found by
// scanning rather than with a map.
const linearDedupLimit = 32

// buildLoadAssignment renders endpoints as the load assignment grpc-go
// accepts: one locality group per distinct locality (sorted), each with a
// Locality message (grpc-go NACKs a missing one) and a load_balancing_weight
// equal to its endpoint count (grpc-go silently drops localities of weight
// 0), and no address listed twice (grpc-go NACKs duplicates across the whole
// assignment). The first occurrence of a duplicated address wins.
func buildLoadAssignment(name string, eps []*model.Endpoint) (model.Resource, error) {
	scratch := claScratchPool.Get().(*claScratch)
	defer claScratchPool.Put(scratch)
	return marshalResource(name, scratch.fill(name, eps))
}

// NewLoadAssignment builds the load assignment Generate would serve for
// these endpoints as a fresh message the caller owns, for generators that
// adjust it (locality priorities, weights) before marshalling.
func NewLoadAssignment(name string, eps []*model.Endpoint) *endpoint.ClusterLoadAssignment {
	return new(claScratch).fill(name, eps)
}

// claScratch holds the messages of one load assignment while it is
// marshalled. Only the marshalled bytes outlive a build, so the messages are
// pooled: a cold EDS push would otherwise allocate (and collect) several
// kilobytes of message structs per cluster.
type claScratch struct {
	kept           []*model.Endpoint
	lbEndpoints    []endpoint.LbEndpoint
	lbEndpointPtrs []*endpoint.LbEndpoint
	hostIDs        []endpoint.LbEndpoint_Endpoint
	endpointMsgs   []endpoint.Endpoint
	addresses      []core.Address
	socketWrappers []core.Address_SocketAddress
	sockets        []core.SocketAddress
	ports          []core.SocketAddress_PortValue
	groups         []endpoint.LocalityLbEndpoints
	groupPtrs      []*endpoint.LocalityLbEndpoints
	localities     []core.Locality
	weights        []wrapperspb.UInt32Value
	cla            endpoint.ClusterLoadAssignment
}

var claScratchPool = sync.Pool{New: func() any { return &claScratch{} }}

// grow returns s with length n, reallocating only when its capacity is short.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n+n/4)
	}
	return s[:n]
}

// fill builds the assignment in the scratch messages. Every field that a
// previous use set is overwritten, so no reset is needed.
func (s *claScratch) fill(name string, eps []*model.Endpoint) *endpoint.ClusterLoadAssignment {
	s.kept = usableEndpoints(s.kept[:0], eps)
	kept := s.kept
	if !slices.IsSortedFunc(kept, compareEndpointLocality) {
		slices.SortStableFunc(kept, compareEndpointLocality)
	}

	n := len(kept)
	s.lbEndpoints = grow(s.lbEndpoints, n)
	s.lbEndpointPtrs = grow(s.lbEndpointPtrs, n)
	s.hostIDs = grow(s.hostIDs, n)
	s.endpointMsgs = grow(s.endpointMsgs, n)
	s.addresses = grow(s.addresses, n)
	s.socketWrappers = grow(s.socketWrappers, n)
	s.sockets = grow(s.sockets, n)
	s.ports = grow(s.ports, n)
	for i, ep := range kept {
		s.ports[i].PortValue = ep.Port
		s.sockets[i].Address = ep.Address
		s.sockets[i].PortSpecifier = &s.ports[i]
		s.socketWrappers[i].SocketAddress = &s.sockets[i]
		s.addresses[i].Address = &s.socketWrappers[i]
		s.endpointMsgs[i].Address = &s.addresses[i]
		s.hostIDs[i].Endpoint = &s.endpointMsgs[i]
		s.lbEndpoints[i].HostIdentifier = &s.hostIDs[i]
		s.lbEndpoints[i].HealthStatus = healthStatus(ep.Health)
		s.lbEndpointPtrs[i] = &s.lbEndpoints[i]
	}

	groups := 0
	for i := range n {
		if i == 0 || kept[i].Locality != kept[i-1].Locality {
			groups++
		}
	}
	s.groups = grow(s.groups, groups)
	s.groupPtrs = grow(s.groupPtrs, groups)
	s.localities = grow(s.localities, groups)
	s.weights = grow(s.weights, groups)
	g := 0
	for start := 0; start < n; g++ {
		end := start + 1
		for end < n && kept[end].Locality == kept[start].Locality {
			end++
		}
		loc := kept[start].Locality
		s.localities[g].Region, s.localities[g].Zone, s.localities[g].SubZone = loc.Region, loc.Zone, loc.SubZone
		s.weights[g].Value = uint32(end - start)
		s.groups[g].Locality = &s.localities[g]
		s.groups[g].LbEndpoints = s.lbEndpointPtrs[start:end:end]
		s.groups[g].LoadBalancingWeight = &s.weights[g]
		s.groupPtrs[g] = &s.groups[g]
		start = end
	}
	s.cla.ClusterName = name
	s.cla.Endpoints = s.groupPtrs
	clear(s.kept) // do not pin endpoints from the pool
	return &s.cla
}

// usableEndpoints appends to kept the endpoints that have an address and
// port, without repeated address:port pairs.
func usableEndpoints(kept, eps []*model.Endpoint) []*model.Endpoint {
	var seen map[endpointAddr]struct{}
	if len(eps) > linearDedupLimit {
		seen = make(map[endpointAddr]struct{}, len(eps))
	}
	for _, ep := range eps {
		if ep.Address == "" || ep.Port == 0 {
			continue
		}
		addr := endpointAddr{ep.Address, ep.Port}
		if seen != nil {
			if _, dup := seen[addr]; dup {
				continue
			}
			seen[addr] = struct{}{}
		} else if slices.ContainsFunc(kept, func(k *model.Endpoint) bool { return k.Address == ep.Address && k.Port == ep.Port }) {
			continue
		}
		kept = append(kept, ep)
	}
	return kept
}

type endpointAddr struct {
	address string
	port    uint32
}

func compareEndpointLocality(a, b *model.Endpoint) int {
	return compareLocality(a.Locality, b.Locality)
}

func compareLocality(a, b model.Locality) int {
	return cmp.Or(cmp.Compare(a.Region, b.Region), cmp.Compare(a.Zone, b.Zone), cmp.Compare(a.SubZone, b.SubZone))
}

func healthStatus(h model.HealthStatus) core.HealthStatus {
	switch h {
	case model.Healthy:
		return core.HealthStatus_HEALTHY
	case model.Draining:
		return core.HealthStatus_DRAINING
	default:
		return core.HealthStatus_UNHEALTHY
	}
}
