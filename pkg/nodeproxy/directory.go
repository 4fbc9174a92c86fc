package nodeproxy

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/meshpilot/meshpilot/pkg/workloadapi"
)

// Directory is the node proxy's view of the mesh, kept from WDS: every
// workload and service by resource name, workloads by IP, services by VIP,
// and the workloads behind each service. Readers get immutable messages.
type Directory struct {
	mu     sync.RWMutex
	byName map[string]*workloadapi.Address
	// versions are the resources' versions, told to the server when a
	// stream reconnects.
	versions  map[string]string
	workloads map[netip.Addr]*workloadapi.Workload
	services  map[netip.Addr]*workloadapi.Service
	// members are the workloads of each service, by the service's
	// "<namespace>/<hostname>" key (Workload.services' key).
	members map[string][]*workloadapi.Workload
	changed chan struct{}
}

// NewDirectory returns an empty directory.
func NewDirectory() *Directory {
	return &Directory{
		byName:    map[string]*workloadapi.Address{},
		versions:  map[string]string{},
		workloads: map[netip.Addr]*workloadapi.Workload{},
		services:  map[netip.Addr]*workloadapi.Service{},
		members:   map[string][]*workloadapi.Workload{},
		changed:   make(chan struct{}),
	}
}

// Apply adds or replaces the named addresses and removes the removed
// names, as one delta xDS response says, and wakes Changed's waiters.
func (d *Directory) Apply(updated map[string]*workloadapi.Address, removed []string) {
	d.applyVersioned(updated, nil, removed)
}

func (d *Directory) applyVersioned(updated map[string]*workloadapi.Address, versions map[string]string, removed []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, name := range removed {
		delete(d.byName, name)
		delete(d.versions, name)
	}
	for name, a := range updated {
		d.byName[name] = a
		d.versions[name] = versions[name]
	}
	d.reindex()
	close(d.changed)
	d.changed = make(chan struct{})
}

// reindex rebuilds the lookups from byName. A node has a few hundred
// workloads and a delta touches a few, so this costs little next to the
// response's unmarshalling, and it keeps the lookups exactly in step.
func (d *Directory) reindex() {
	clear(d.workloads)
	clear(d.services)
	clear(d.members)
	for _, a := range d.byName {
		switch t := a.GetType().(type) {
		case *workloadapi.Address_Workload:
			w := t.Workload
			d.indexIPs(w)
			for key := range w.GetServices() {
				d.members[key] = append(d.members[key], w)
			}
		case *workloadapi.Address_Service:
			s := t.Service
			for _, na := range s.GetAddresses() {
				if ip, ok := netip.AddrFromSlice(na.GetAddress()); ok {
					d.services[ip.Unmap()] = s
				}
			}
		}
	}
	for key := range d.members {
		// A stable order, so that picks do not depend on map iteration.
		slices.SortFunc(d.members[key], func(a, b *workloadapi.Workload) int {
			switch {
			case a.GetUid() < b.GetUid():
				return -1
			case a.GetUid() > b.GetUid():
				return 1
			}
			return 0
		})
	}
}

// indexIPs makes w the owner of its IPs where it outranks their current
// one. A host-network workload owns none: its IP is not its own (a Pod on
// its node's, an EndpointSlice address may be anyone's), so it is reached
// only as a service's endpoint, never by IP, as ztunnel does.
func (d *Directory) indexIPs(w *workloadapi.Workload) {
	if w.GetNetworkMode() == workloadapi.NetworkMode_HOST_NETWORK {
		return
	}
	for _, raw := range w.GetAddresses() {
		if ip, ok := netip.AddrFromSlice(raw); ok {
			ip = ip.Unmap()
			if prev, taken := d.workloads[ip]; !taken || outranks(w, prev) {
				d.workloads[ip] = w
			}
		}
	}
}

// outranks reports whether a should own an IP that b also claims. As
// ztunnel ranks them, a Pod comes first (other kinds are easier to point
// at any address), then one with HBONE (it is in the mesh, so a tunnel
// keeps its identity); unlike ztunnel, which keeps whichever came last,
// the smaller uid breaks a tie, so that the owner does not depend on the
// order of a map.
func outranks(a, b *workloadapi.Workload) bool {
	if ra, rb := ipRank(a), ipRank(b); ra != rb {
		return ra > rb
	}
	return a.GetUid() < b.GetUid()
}

func ipRank(w *workloadapi.Workload) int {
	rank := 0
	if strings.Contains(w.GetUid(), "//Pod/") {
		rank += 2
	}
	if w.GetTunnelProtocol() == workloadapi.TunnelProtocol_HBONE {
		rank++
	}
	return rank
}

// knownVersions returns a copy of the versions held, by resource name.
func (d *Directory) knownVersions() map[string]string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return maps.Clone(d.versions)
}

// Changed returns a channel closed at the next Apply.
func (d *Directory) Changed() <-chan struct{} {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.changed
}

// WorkloadByIP returns the workload that owns ip, nil if none.
func (d *Directory) WorkloadByIP(ip netip.Addr) *workloadapi.Workload {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.workloads[ip.Unmap()]
}

// ServiceByVIP returns the service with that virtual IP, nil if none.
func (d *Directory) ServiceByVIP(ip netip.Addr) *workloadapi.Service {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.services[ip.Unmap()]
}

// Endpoints returns the workloads behind svc that a connection from src
// may reach, with the target port each serves svc's port on, skipping
// those that do not serve it. Unhealthy workloads (not Ready, or being
// deleted) are skipped, as ztunnel and kube-proxy skip them, unless the
// service allows every endpoint (Istio says so for
// publishNotReadyAddresses); the service's routing preferences then keep
// the workloads closest to src (see preferred).
func (d *Directory) Endpoints(src *workloadapi.Workload, svc *workloadapi.Service, port uint32) []Endpoint {
	key := svc.GetNamespace() + "/" + svc.GetHostname()
	lb := svc.GetLoadBalancing()
	allowAll := lb.GetHealthPolicy() == workloadapi.LoadBalancing_ALLOW_ALL
	d.mu.RLock()
	defer d.mu.RUnlock()
	var out []Endpoint
	for _, w := range d.members[key] {
		if w.GetStatus() != workloadapi.WorkloadStatus_HEALTHY && !allowAll {
			continue
		}
		for _, p := range w.GetServices()[key].GetPorts() {
			if p.GetServicePort() != port {
				continue
			}
			target := p.GetTargetPort()
			if target == 0 {
				target = port
			}
			out = append(out, Endpoint{Workload: w, Port: target})
		}
	}
	return preferred(src, lb, out)
}

// preferred applies a service's routing preferences as ztunnel does: an
// endpoint's rank is how many of the scopes, in order, it shares with the
// source; STRICT (internalTrafficPolicy Local is STRICT to the node) keeps
// only those that share all of them, FAILOVER (PreferClose) those of the
// best rank there is. A first scope NETWORK that does not match is passed
// over rather than ending the count, and one that matches outranks the
// others.
func preferred(src *workloadapi.Workload, lb *workloadapi.LoadBalancing, eps []Endpoint) []Endpoint {
	mode, scopes := lb.GetMode(), lb.GetRoutingPreference()
	if mode == workloadapi.LoadBalancing_UNSPECIFIED_MODE || len(scopes) == 0 || len(eps) == 0 {
		return eps
	}
	networkFirst := scopes[0] == workloadapi.LoadBalancing_NETWORK
	ranks := make([]int, len(eps))
	best := -1
	for i, ep := range eps {
		w := ep.Workload
		rank, adjust := 0, 0
		for _, scope := range scopes {
			var match bool
			switch scope {
			case workloadapi.LoadBalancing_REGION:
				match = src.GetLocality().GetRegion() == w.GetLocality().GetRegion()
			case workloadapi.LoadBalancing_ZONE:
				match = src.GetLocality().GetZone() == w.GetLocality().GetZone()
			case workloadapi.LoadBalancing_SUBZONE:
				match = src.GetLocality().GetSubzone() == w.GetLocality().GetSubzone()
			case workloadapi.LoadBalancing_NODE:
				match = src.GetNode() == w.GetNode()
			case workloadapi.LoadBalancing_CLUSTER:
				match = src.GetClusterId() == w.GetClusterId()
			case workloadapi.LoadBalancing_NETWORK:
				match = src.GetNetwork() == w.GetNetwork()
				if networkFirst {
					if !match {
						continue
					}
					adjust = len(scopes) - 1
				}
			}
			if !match {
				break
			}
			rank++
		}
		if mode == workloadapi.LoadBalancing_STRICT && rank != len(scopes) {
			ranks[i] = -1
			continue
		}
		ranks[i] = rank + adjust
		best = max(best, ranks[i])
	}
	out := eps[:0]
	for i, ep := range eps {
		if ranks[i] >= 0 && ranks[i] == best {
			out = append(out, ep)
		}
	}
	return out
}

// Endpoint is one workload port behind a service port.
type Endpoint struct {
	Workload *workloadapi.Workload
	Port     uint32
}

// LocalWorkloads returns the workloads on node that use HBONE (ambient
// ones, whose traffic the node proxy carries), sorted by UID.
func (d *Directory) LocalWorkloads(node string) []*workloadapi.Workload {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var out []*workloadapi.Workload
	for _, a := range d.byName {
		w := a.GetWorkload()
		if w != nil && w.GetNode() == node && w.GetTunnelProtocol() == workloadapi.TunnelProtocol_HBONE {
			out = append(out, w)
		}
	}
	slices.SortFunc(out, func(a, b *workloadapi.Workload) int {
		switch {
		case a.GetUid() < b.GetUid():
			return -1
		case a.GetUid() > b.GetUid():
			return 1
		}
		return 0
	})
	return out
}

// Size is the number of addresses known, for the debug page.
func (d *Directory) Size() (workloads, services int) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, a := range d.byName {
		if a.GetWorkload() != nil {
			workloads++
		} else {
			services++
		}
	}
	return workloads, services
}

// identity is a workload's SPIFFE identity. WDS leaves out the default
// trust domain and service account, as ztunnel expects.
func identity(w *workloadapi.Workload) string {
	td, sa := w.GetTrustDomain(), w.GetServiceAccount()
	if td == "" {
		td = "cluster.local"
	}
	if sa == "" {
		sa = "default"
	}
	return "spiffe://" + td + "/ns/" + w.GetNamespace() + "/sa/" + sa
}

// workloadIPs returns w's addresses.
func workloadIPs(w *workloadapi.Workload) []netip.Addr {
	var out []netip.Addr
	for _, raw := range w.GetAddresses() {
		if ip, ok := netip.AddrFromSlice(raw); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out
}
