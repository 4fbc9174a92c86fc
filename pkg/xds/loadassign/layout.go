package loadassign

import (
	"slices"
	"strings"
	"sync"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// linearDedupLimit is the endpoint count up to which duplicates are found by
// scanning rather than with a map.
const linearDedupLimit = 32

// Layout is a ClusterLoadAssignment before encoding: the cluster name and
// its locality groups, each a run of endpoints. As laid out it is what
// grpc-go accepts (and Envoy too): one group per distinct locality (sorted), each with a Locality
// message (grpc-go NACKs a missing one) and a load_balancing_weight equal to
// its endpoint count (grpc-go silently drops localities of weight 0), and no
// address listed twice (grpc-go NACKs duplicates across the whole
// assignment; the first occurrence wins). Generators that weight or
// prioritise localities (Envoy's) rearrange Groups before Marshal.
type Layout struct {
	Name   string
	Groups []Group
	// endpoints backs the groups' Endpoints: every usable endpoint, in
	// locality order.
	endpoints []*model.Endpoint
	// sizes is Marshal's scratch: the encoded sizes of each endpoint.
	sizes []lbEndpointSizes
}

// Group is one LocalityLbEndpoints of an assignment.
type Group struct {
	Locality model.Locality
	// Endpoints is a window of the layout's own endpoint list, which its
	// owner may reorder or split; it never aliases the caller's slice.
	Endpoints []*model.Endpoint
	// Weight is the load_balancing_weight (always present on the wire).
	Weight   uint32
	Priority uint32
}

// NewLayout lays out eps as the load assignment of cluster name that the
// Cache serves, in a fresh layout the caller owns.
func NewLayout(name string, eps []*model.Endpoint) *Layout {
	l := &Layout{endpoints: make([]*model.Endpoint, 0, len(eps))}
	l.fill(name, eps)
	return l
}

// buildLoadAssignment encodes the load assignment of eps as a resource.
func buildLoadAssignment(name string, eps []*model.Endpoint) (model.Resource, error) {
	l := layoutPool.Get().(*Layout)
	l.fill(name, eps)
	b, err := l.Marshal()
	l.release()
	if err != nil {
		return model.Resource{}, err
	}
	return model.Resource{Name: name, Resource: &anypb.Any{TypeUrl: resource.EndpointType, Value: b}}, nil
}

// layoutPool recycles the layouts of shared assignments: only their
// encoding outlives a build.
var layoutPool = sync.Pool{New: func() any { return new(Layout) }}

// release returns l to the pool without pinning the endpoints it listed.
func (l *Layout) release() {
	clear(l.endpoints)
	clear(l.Groups)
	l.Name = ""
	layoutPool.Put(l)
}

// fill lays out eps, reusing l's slices.
func (l *Layout) fill(name string, eps []*model.Endpoint) {
	l.Name = name
	l.endpoints = usableEndpoints(l.endpoints[:0], eps)
	kept := l.endpoints
	if !slices.IsSortedFunc(kept, compareEndpointLocality) {
		slices.SortStableFunc(kept, compareEndpointLocality)
	}
	l.Groups = l.Groups[:0]
	for start := 0; start < len(kept); {
		end := start + 1
		for end < len(kept) && kept[end].Locality == kept[start].Locality {
			end++
		}
		l.Groups = append(l.Groups, Group{
			Locality:  kept[start].Locality,
			Endpoints: kept[start:end:end],
			Weight:    uint32(end - start),
		})
		start = end
	}
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

// compareLocality orders localities by region, zone and subzone. It stops
// at the first part that differs: layouts sort every assignment's endpoints,
// and most neighbours share a region.
func compareLocality(a, b model.Locality) int {
	if c := strings.Compare(a.Region, b.Region); c != 0 {
		return c
	}
	if c := strings.Compare(a.Zone, b.Zone); c != 0 {
		return c
	}
	return strings.Compare(a.SubZone, b.SubZone)
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
