package pushcontext

import "github.com/meshpilot/meshpilot/pkg/model"

// EndpointWorkload is one address of a Service's EndpointSlices that names
// no Pod: a selector-less Service's backend outside the cluster, or one
// another controller manages. Node proxies know Pods' workloads from the
// Pods; these they can learn only from the slices, as istiod's ambient
// index sends them.
type EndpointWorkload struct {
	Service *model.Service
	Address string
	// Endpoints are the address's endpoints, one per port it serves.
	Endpoints []*model.Endpoint
	// Version is the service's endpoints version (EndpointsVersion): the
	// same version, the same workload.
	Version uint64
}

// EndpointWorkloads returns every EndpointWorkload, by service in the
// services' order, then by address in the slices' order.
func (pc *PushContext) EndpointWorkloads() []EndpointWorkload {
	var out []EndpointWorkload
	for i := range pc.endpoints.slots {
		e := pc.endpoints.slots[i].entry.Load()
		if len(e.podless) == 0 {
			continue
		}
		at := map[string]int{}
		for _, ep := range e.podless {
			j, ok := at[ep.Address]
			if !ok {
				j = len(out)
				at[ep.Address] = j
				out = append(out, EndpointWorkload{Service: e.service, Address: ep.Address, Version: e.version})
			}
			out[j].Endpoints = append(out[j].Endpoints, ep)
		}
	}
	return out
}

// EndpointWorkloadsVersion changes whenever the endpoint fast path changes
// what EndpointWorkloads returns; a new snapshot may start it over.
func (pc *PushContext) EndpointWorkloadsVersion() uint64 {
	return pc.endpoints.podlessVersion.Load()
}

// HasEndpointWorkloads reports whether the service has endpoints that name
// no Pod.
func (pc *PushContext) HasEndpointWorkloads(name model.NamespacedName) bool {
	if pc == nil {
		return false
	}
	ord, ok := pc.services.byName[name]
	if !ok {
		return false
	}
	return len(pc.endpoints.slots[ord].entry.Load().podless) > 0
}

// podless returns the endpoints of eps that name no Pod: nil if none do,
// eps itself if all do not (a selector-less Service's usual slice).
func podless(eps []*model.Endpoint) []*model.Endpoint {
	n := 0
	for _, ep := range eps {
		if !ep.FromPod {
			n++
		}
	}
	switch n {
	case 0:
		return nil
	case len(eps):
		return eps
	}
	out := make([]*model.Endpoint, 0, n)
	for _, ep := range eps {
		if !ep.FromPod {
			out = append(out, ep)
		}
	}
	return out
}
