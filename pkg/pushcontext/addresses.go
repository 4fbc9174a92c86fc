package pushcontext

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// addressIndex is what workload discovery (WDS) reads: the workloads that
// have addresses, found by network address and by uid, the services found
// by virtual IP, the namespaces that ask for ambient mode, and the
// cluster's network. It depends on workloads, services and namespaces.
type addressIndex struct {
	// network is the cluster's network, which every workload and service
	// address is on, as istiod assigns it in ambient mode: the label
	// topology.istio.io/network of the control plane's namespace, else
	// the default network (""). A Pod's own network label is not read:
	// node proxies find a service's VIP and its Pods by (network, IP), so
	// the two must agree.
	network string
	// workloads are the workloads with at least one valid IP, sorted by uid.
	workloads []*model.Workload
	uids      []string // uids[i] is workloads[i]'s
	byUID     map[string]*model.Workload
	// byAddress maps "<network>/<ip>" to the workloads there, by uid:
	// host-network Pods share their node's IP.
	byAddress map[string][]*model.Workload
	// servicesByVIP maps "<network>/<vip>" to its service.
	servicesByVIP map[string]*model.Service
	// ambientNamespaces are the namespaces labelled for ambient mode.
	ambientNamespaces map[string]bool
}

// defaultClusterID names the cluster in workload uids, Istio's default.
const defaultClusterID = "Kubernetes"

func buildAddressIndex(workloads []*model.Workload, services []*model.Service, namespaces []*model.Namespace, clusterID, systemNamespace string) *addressIndex {
	idx := &addressIndex{
		byUID:             make(map[string]*model.Workload, len(workloads)),
		byAddress:         make(map[string][]*model.Workload, len(workloads)),
		servicesByVIP:     make(map[string]*model.Service, len(services)),
		ambientNamespaces: map[string]bool{},
	}
	for _, ns := range namespaces {
		if ns.Name == systemNamespace {
			idx.network = ns.Labels[model.NetworkLabel]
		}
		if ns.Labels[model.DataplaneModeLabel] == model.DataplaneModeAmbient {
			idx.ambientNamespaces[ns.Name] = true
		}
	}
	type withUID struct {
		uid string
		w   *model.Workload
	}
	list := make([]withUID, 0, len(workloads))
	for _, w := range workloads {
		if w == nil || !hasValidIP(w.IPs) {
			continue
		}
		list = append(list, withUID{workloadUID(clusterID, w), w})
	}
	slices.SortFunc(list, func(a, b withUID) int { return cmp.Compare(a.uid, b.uid) })
	idx.workloads = make([]*model.Workload, len(list))
	idx.uids = make([]string, len(list))
	for i, e := range list {
		idx.workloads[i], idx.uids[i] = e.w, e.uid
		idx.byUID[e.uid] = e.w
		for _, ip := range e.w.IPs {
			key := NetworkAddress(idx.network, ip)
			if key == "" {
				continue
			}
			// A Pod that lists one IP twice is there once; its entries are
			// adjacent because workloads come one at a time.
			if at := idx.byAddress[key]; len(at) == 0 || at[len(at)-1] != e.w {
				idx.byAddress[key] = append(at, e.w)
			}
		}
	}
	for _, svc := range services {
		for _, vip := range svc.ClusterIPs {
			if key := NetworkAddress(idx.network, vip); key != "" {
				if _, taken := idx.servicesByVIP[key]; !taken {
					idx.servicesByVIP[key] = svc
				}
			}
		}
	}
	return idx
}

func hasValidIP(ips []string) bool {
	for _, ip := range ips {
		if _, err := netip.ParseAddr(ip); err == nil {
			return true
		}
	}
	return false
}

// workloadUID is Istio's uid of a Pod's workload:
// <cluster>//Pod/<namespace>/<name>.
func workloadUID(clusterID string, w *model.Workload) string {
	return clusterID + "//Pod/" + w.Namespace + "/" + w.Name
}

// NetworkAddress renders an address as WDS names it on demand,
// "<network>/<ip>", with the IP in canonical form; "" for an invalid IP.
func NetworkAddress(network, ip string) string {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return ""
	}
	return network + "/" + addr.Unmap().String()
}

// Network is the cluster's network, which every address WDS sends is on.
func (pc *PushContext) Network() string { return pc.addresses.network }

// ClusterID names this cluster in workload uids.
func (pc *PushContext) ClusterID() string { return pc.opts.ClusterID }

// WorkloadUID returns the uid that WDS names w by.
func (pc *PushContext) WorkloadUID(w *model.Workload) string {
	return workloadUID(pc.opts.ClusterID, w)
}

// AddressedWorkloads returns the workloads that have a valid IP, sorted by
// uid, and their uids. Both slices are shared: never mutate them.
func (pc *PushContext) AddressedWorkloads() ([]*model.Workload, []string) {
	return pc.addresses.workloads, pc.addresses.uids
}

// WorkloadByUID returns the workload with that uid (with an IP), or nil.
func (pc *PushContext) WorkloadByUID(uid string) *model.Workload {
	return pc.addresses.byUID[uid]
}

// WorkloadByAddress returns the workload at ip on network, the first by
// uid where several share it, or nil.
func (pc *PushContext) WorkloadByAddress(network, ip string) *model.Workload {
	if at := pc.addresses.byAddress[NetworkAddress(network, ip)]; len(at) > 0 {
		return at[0]
	}
	return nil
}

// ServiceByVIP returns the service with that virtual IP on network, or nil.
func (pc *PushContext) ServiceByVIP(network, ip string) *model.Service {
	return pc.addresses.servicesByVIP[NetworkAddress(network, ip)]
}

// LookupAddress resolves a "<network>/<ip>" key to the workloads there,
// sorted by uid, or else the service there; none if neither. Every
// workload that shares the address is returned, as istiod answers: which
// of them owns it is the node proxy's choice. The slice is shared: never
// mutate it.
func (pc *PushContext) LookupAddress(key string) ([]*model.Workload, *model.Service) {
	if ws := pc.addresses.byAddress[key]; len(ws) > 0 {
		return ws, nil
	}
	return nil, pc.addresses.servicesByVIP[key]
}

// AmbientNamespace reports whether namespace ns is labelled for ambient.
func (pc *PushContext) AmbientNamespace(ns string) bool {
	return pc.addresses.ambientNamespaces[ns]
}

// TunnelsTo reports whether node proxies may send w its traffic over
// HBONE. It takes two facts: w is asked to be in ambient mode (its
// namespace or its own label says ambient, and its own label does not say
// none), and its capture is in place (the CNI agent annotated it
// ambient.istio.io/redirection: enabled). istiod looks at the annotation
// alone, which the CNI agent writes only for ambient Pods; requiring both
// means a tunnel is never sent to a Pod whose capture is not in place, nor
// to one that has left ambient mode while the annotation lingers.
func (pc *PushContext) TunnelsTo(w *model.Workload) bool {
	if w == nil || !w.Redirected {
		return false
	}
	var nsLabels map[string]string
	if pc.addresses.ambientNamespaces[w.Namespace] {
		nsLabels = ambientLabels
	}
	return model.AmbientEnabled(w.Labels, nsLabels)
}

var ambientLabels = map[string]string{model.DataplaneModeLabel: model.DataplaneModeAmbient}
