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

// WDSEndpointsVersion changes whenever the endpoint fast path changes
// what EndpointWorkloads or SelectorlessPods return; a new snapshot may
// start it over.
func (pc *PushContext) WDSEndpointsVersion() uint64 {
	return pc.endpoints.wdsVersion.Load()
}

// WDSReadsEndpoints reports whether WDS is made of the service's
// endpoints too: some name no Pod (EndpointWorkloads), or the service has
// no selector, so the Pods its endpoints name serve it only through them
// (SelectorlessPods).
func (pc *PushContext) WDSReadsEndpoints(name model.NamespacedName) bool {
	if pc == nil {
		return false
	}
	ord, ok := pc.services.byName[name]
	if !ok {
		return false
	}
	return wdsReads(pc.endpoints.slots[ord].entry.Load())
}

func wdsReads(e *endpointEntry) bool {
	return len(e.podless) > 0 || (len(e.service.Selector) == 0 && len(e.all) > 0)
}

// SelectorlessPods is a Service without a selector and its endpoints that
// name Pods. Those Pods serve it only through its slices, so WDS lists it
// among their services, as istiod does.
type SelectorlessPods struct {
	Service   *model.Service
	Endpoints []*model.Endpoint
	// Version is the service's endpoints version.
	Version uint64
}

// SelectorlessPods returns every SelectorlessPods, in the services' order.
func (pc *PushContext) SelectorlessPods() []SelectorlessPods {
	var out []SelectorlessPods
	for i := range pc.endpoints.slots {
		e := pc.endpoints.slots[i].entry.Load()
		if len(e.service.Selector) > 0 || e.service.IsExternalName() || len(e.all) == len(e.podless) {
			continue
		}
		eps := make([]*model.Endpoint, 0, len(e.all)-len(e.podless))
		for _, ep := range e.all {
			if ep.FromPod {
				eps = append(eps, ep)
			}
		}
		out = append(out, SelectorlessPods{Service: e.service, Endpoints: eps, Version: e.version})
	}
	return out
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
