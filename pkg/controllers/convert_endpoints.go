package controllers

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// Labels that place a workload, read from the Pod.
const (
	labelRegion  = "topology.kubernetes.io/region"
	labelZone    = "topology.kubernetes.io/zone"
	labelSubzone = "topology.istio.io/subzone"
	// labelIstioLocality ("region.zone.subzone") overrides all the others.
	labelIstioLocality = "istio-locality"
)

// SliceService names the Service an EndpointSlice belongs to; ok is false
// when the slice carries no service-name label.
func SliceService(slice *discoveryv1.EndpointSlice) (model.NamespacedName, bool) {
	name := slice.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return model.NamespacedName{}, false
	}
	return model.NamespacedName{Namespace: slice.Namespace, Name: name}, true
}

// WorkloadLookup finds the workload (Pod) an endpoint targets; nil when it
// is not known (yet).
type WorkloadLookup func(model.NamespacedName) *model.Workload

// ConvertEndpointSlice returns one endpoint per (address × port) of the
// slice. Workload details come from the Pods the endpoints target; their
// label maps are shared, never copied.
func ConvertEndpointSlice(slice *discoveryv1.EndpointSlice, lookup WorkloadLookup) []*model.Endpoint {
	if slice.AddressType == discoveryv1.AddressTypeFQDN {
		return nil
	}
	ports := slicePorts(slice.Ports)
	if len(ports) == 0 {
		return nil
	}
	total := 0
	for i := range slice.Endpoints {
		total += len(slice.Endpoints[i].Addresses)
	}
	total *= len(ports)
	if total == 0 {
		return nil
	}
	// Two allocations for the whole slice: the endpoints and the pointers.
	backing := make([]model.Endpoint, total)
	out := make([]*model.Endpoint, total)
	n := 0
	for i := range slice.Endpoints {
		ep := &slice.Endpoints[i]
		base := model.Endpoint{
			Health:    endpointHealth(ep.Conditions),
			Namespace: slice.Namespace,
		}
		var zone string
		if ep.Zone != nil {
			zone = *ep.Zone
		}
		var w *model.Workload
		if ref := ep.TargetRef; ref != nil && ref.Kind == "Pod" {
			base.FromPod = true
			if lookup != nil {
				w = lookup(podKey(ref, slice.Namespace))
			}
		}
		if w != nil {
			base.Labels, base.MTLS = w.Labels, model.LabelledForMTLS(w.Labels)
			base.ServiceAccount = w.ServiceAccount
		}
		base.Locality = endpointLocality(zone, w)
		for _, addr := range ep.Addresses {
			for _, p := range ports {
				e := &backing[n]
				*e = base
				e.Address = addr
				e.Port = p.port
				e.ServicePortName = p.name
				out[n] = e
				n++
			}
		}
	}
	return out[:n]
}

type slicePort struct {
	name string
	port uint32
}

// slicePorts keeps the TCP ports that have a number. A slice port without
// one means "all ports", which a proxy cannot dial. The mesh proxies TCP
// alone (see servicePorts): a UDP or SCTP port's endpoints would join a
// TCP port of the same name (a selectorless Service's mirrored Endpoints can
// have one unnamed port of each) and be dialled over TCP. No protocol is TCP.
func slicePorts(in []discoveryv1.EndpointPort) []slicePort {
	out := make([]slicePort, 0, len(in))
	for _, p := range in {
		if p.Port == nil || *p.Port <= 0 {
			continue
		}
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			continue
		}
		sp := slicePort{port: uint32(*p.Port)}
		if p.Name != nil {
			sp.name = *p.Name
		}
		out = append(out, sp)
	}
	return out
}

func podKey(ref *corev1.ObjectReference, sliceNamespace string) model.NamespacedName {
	ns := ref.Namespace
	if ns == "" {
		ns = sliceNamespace
	}
	return model.NamespacedName{Namespace: ns, Name: ref.Name}
}

// endpointHealth maps EndpointSlice conditions: ready (or unknown) is
// healthy; terminating but still serving is draining; the rest unhealthy.
func endpointHealth(c discoveryv1.EndpointConditions) model.HealthStatus {
	switch {
	case c.Ready == nil || *c.Ready:
		return model.Healthy
	case c.Serving != nil && *c.Serving && c.Terminating != nil && *c.Terminating:
		return model.Draining
	default:
		return model.Unhealthy
	}
}

// endpointLocality takes the zone from the slice and the region and
// subzone from the Pod, unless the Pod pins all three with istio-locality.
func endpointLocality(zone string, w *model.Workload) model.Locality {
	if w == nil {
		return model.Locality{Zone: zone}
	}
	if _, pinned := w.Labels[labelIstioLocality]; pinned {
		return w.Locality
	}
	loc := w.Locality
	if zone != "" {
		loc.Zone = zone
	}
	return loc
}
