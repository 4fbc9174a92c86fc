package wdsgen

import (
	"slices"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
	"github.com/meshpilot/meshpilot/pkg/workloadapi"
)

// sliceTarget is a selector-less service that a Pod serves because the
// service's slices name it; the version tells one content of its
// endpoints from another.
type sliceTarget struct {
	service *model.Service
	version uint64
}

// selectorlessIndex maps a Pod address to the selector-less services whose
// slices name it, with the ports they give it there.
type selectorlessIndex map[string][]slicePorts

type slicePorts struct {
	sliceTarget
	ports []*workloadapi.Port
}

func indexSelectorless(all []pushcontext.SelectorlessPods) selectorlessIndex {
	if len(all) == 0 {
		return nil
	}
	idx := selectorlessIndex{}
	for _, sp := range all {
		target := sliceTarget{service: sp.Service, version: sp.Version}
		for _, ep := range sp.Endpoints {
			i := slices.IndexFunc(sp.Service.Ports, func(p *model.Port) bool { return p.Name == ep.ServicePortName })
			if i < 0 {
				continue
			}
			port := &workloadapi.Port{ServicePort: sp.Service.Ports[i].Port, TargetPort: ep.Port}
			list := idx[ep.Address]
			if j := slices.IndexFunc(list, func(s slicePorts) bool { return s.sliceTarget == target }); j >= 0 {
				list[j].ports = appendPortOnce(list[j].ports, port)
				continue
			}
			idx[ep.Address] = append(list, slicePorts{sliceTarget: target, ports: []*workloadapi.Port{port}})
		}
	}
	return idx
}

// targets returns the selector-less services whose slices name w's
// addresses, other than those that select it already. A host-network Pod
// has its node's address, which its slices do not tell from its
// neighbours', so it is never matched by address.
func (idx selectorlessIndex) targets(w *model.Workload, selecting []*model.Service) []sliceTarget {
	if len(idx) == 0 || w.HostNetwork {
		return nil
	}
	var out []sliceTarget
	for _, ip := range w.IPs {
		for _, sp := range idx[ip] {
			if !slices.Contains(selecting, sp.service) && !slices.Contains(out, sp.sliceTarget) {
				out = append(out, sp.sliceTarget)
			}
		}
	}
	return out
}

// ports returns, for each of targets, the ports that its slices give w.
func (idx selectorlessIndex) ports(w *model.Workload, targets []sliceTarget) map[*model.Service][]*workloadapi.Port {
	if len(targets) == 0 {
		return nil
	}
	out := make(map[*model.Service][]*workloadapi.Port, len(targets))
	for _, ip := range w.IPs {
		for _, sp := range idx[ip] {
			if !slices.Contains(targets, sp.sliceTarget) {
				continue
			}
			for _, p := range sp.ports {
				out[sp.service] = appendPortOnce(out[sp.service], p)
			}
		}
	}
	return out
}

// appendPortOnce appends p unless list has its service and target port
// already: an address that two slices of one service list (an IPv4 and an
// IPv6 slice for a dual-stack Pod, or a mirrored slice) serves each port
// once.
func appendPortOnce(list []*workloadapi.Port, p *workloadapi.Port) []*workloadapi.Port {
	for _, q := range list {
		if q.ServicePort == p.ServicePort && q.TargetPort == p.TargetPort {
			return list
		}
	}
	return append(list, p)
}
