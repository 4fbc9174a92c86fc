package wdsgen

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// addressSet is every Address of one push context, marshalled. It is built
// once, by the first connection that asks, and shared by all.
type addressSet struct {
	push  *pushcontext.PushContext
	once  sync.Once
	ready atomic.Bool
	// wdsEndpoints is push's WDSEndpointsVersion when built: the
	// endpoint fast path changes a snapshot in place.
	wdsEndpoints uint64

	// items are sorted by name; never mutated once built.
	items  model.Resources
	byName map[string]int
	// backing maps a service's name to the uids of the workloads it
	// selects, for on-demand subscriptions to its VIP.
	backing map[string][]string
	// endpointsAt maps a "<network>/<ip>" key to the uids of the endpoint
	// workloads there, for on-demand subscriptions to the address.
	endpointsAt map[string][]string
	// inputs are what each item was built from, for the next set to reuse,
	// and services the push context's services they were matched against.
	inputs   map[string]inputs
	services []*model.Service
}

func (s *addressSet) input(name string) (inputs, bool) {
	if s == nil {
		return inputs{}, false
	}
	in, ok := s.inputs[name]
	return in, ok
}

// sameSlice reports whether two slices are the same shared slice: push
// contexts that reuse their services index hand out the same one.
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// inputs are everything an Address depends on. Workloads and services are
// immutable and replaced on change, so pointer equality is content
// equality.
type inputs struct {
	workload *model.Workload
	targets  []*model.Service
	// slices are the selector-less services the workload serves through
	// their slices.
	slices  []sliceTarget
	hbone   bool
	service *model.Service
	// endpoints is the service's endpoints version, for an endpoint
	// workload (whose address is in its name).
	endpoints uint64
	// trustDomain, clusterID and network are mesh-wide, but a change of
	// any must not reuse what was built with another.
	trustDomain, clusterID, network string
}

func (a inputs) equal(b inputs) bool {
	return a.workload == b.workload && a.service == b.service && a.hbone == b.hbone && a.endpoints == b.endpoints &&
		a.trustDomain == b.trustDomain && a.clusterID == b.clusterID && a.network == b.network &&
		slices.Equal(a.targets, b.targets) && slices.Equal(a.slices, b.slices)
}

// setFor returns push's address set, building it if needed from the most
// recent set that is ready.
func (g *AddressGenerator) setFor(push *pushcontext.PushContext) *addressSet {
	version := push.WDSEndpointsVersion()
	g.mu.Lock()
	var set, prev *addressSet
	for _, s := range g.sets {
		if s.push == push && s.wdsEndpoints == version {
			set = s
		}
		if s.ready.Load() {
			prev = s
		}
	}
	if set == nil {
		set = &addressSet{push: push, wdsEndpoints: version}
		g.sets = append(g.sets, set)
		if len(g.sets) > keptSets {
			g.sets = slices.Delete(g.sets, 0, len(g.sets)-keptSets)
		}
	}
	g.mu.Unlock()
	set.once.Do(func() {
		set.build(prev, g)
		set.ready.Store(true)
	})
	return set
}

// build makes every Address of s.push, reusing prev's marshalled resource
// where the inputs are the same.
func (s *addressSet) build(prev *addressSet, g *AddressGenerator) {
	push := s.push
	workloads, uids := push.AddressedWorkloads()
	services := push.Services()
	n := len(workloads) + len(services)
	s.items = make(model.Resources, 0, n)
	s.inputs = make(map[string]inputs, n)
	s.backing = map[string][]string{}
	td, cluster, network := push.TrustDomain(), push.ClusterID(), push.Network()
	// With the same services, a workload that did not change is selected
	// by the same ones: take them from prev instead of matching selectors
	// again (most of a Pod churn's cost at scale).
	sameServices := prev != nil && sameSlice(prev.services, services)
	s.services = services

	emit := func(name string, in inputs, build func() *anyAddress) {
		if prev != nil {
			if old, ok := prev.inputs[name]; ok && old.equal(in) {
				s.items = append(s.items, prev.items[prev.byName[name]])
				s.inputs[name] = in
				return
			}
		}
		a := build()
		if a == nil {
			return
		}
		any, err := a.marshal()
		if err != nil {
			// Cannot happen for messages built here; skip the one
			// resource rather than fail every node proxy's push.
			g.log.Error("marshalling an Address failed; leaving it out", "name", name, "err", err)
			return
		}
		s.items = append(s.items, model.Resource{Name: name, Resource: any})
		s.inputs[name] = in
	}

	bySlices := indexSelectorless(push.SelectorlessPods())
	for i, w := range workloads {
		var targets []*model.Service
		if old, ok := prev.input(uids[i]); ok && sameServices && old.workload == w {
			targets = old.targets
		} else {
			targets = push.ServiceTargets(w)
		}
		sliced := bySlices.targets(w, targets)
		in := inputs{workload: w, targets: targets, slices: sliced, hbone: push.TunnelsTo(w), trustDomain: td, clusterID: cluster, network: network}
		emit(uids[i], in, func() *anyAddress {
			return workloadAddress(push, w, uids[i], targets, bySlices.ports(w, sliced), in.hbone)
		})
		for _, svc := range targets {
			s.backing[serviceName(svc)] = append(s.backing[serviceName(svc)], uids[i])
		}
		for _, t := range sliced {
			s.backing[serviceName(t.service)] = append(s.backing[serviceName(t.service)], uids[i])
		}
	}
	s.endpointsAt = map[string][]string{}
	for _, ew := range push.EndpointWorkloads() {
		uid := endpointWorkloadUID(cluster, ew)
		in := inputs{service: ew.Service, endpoints: ew.Version, trustDomain: td, clusterID: cluster, network: network}
		emit(uid, in, func() *anyAddress { return endpointWorkloadAddress(push, ew, uid) })
		s.backing[serviceName(ew.Service)] = append(s.backing[serviceName(ew.Service)], uid)
		if key := pushcontext.NetworkAddress(network, ew.Address); key != "" {
			s.endpointsAt[key] = append(s.endpointsAt[key], uid)
		}
	}
	for _, svc := range services {
		if svc.IsExternalName() {
			// Left out, as Istio does: the workload API has no DNS
			// service. A node proxy matches a Service by its VIPs, which
			// an ExternalName Service has none of, and a Workload with a
			// hostname is reached only through such a VIP. Clients
			// resolve the name through cluster DNS to its own addresses,
			// which node proxies pass through, as before the mesh. An
			// alias of a mesh Service needs nothing either: its CNAME
			// leads to the target's VIP, which node proxies serve as the
			// target (HBONE, mutual TLS); Istio sends ztunnel no alias.
			continue
		}
		in := inputs{service: svc, trustDomain: td, clusterID: cluster, network: network}
		emit(serviceName(svc), in, func() *anyAddress { return serviceAddress(svc, network) })
	}
	// Names are unique: uids start with the cluster and contain "//" (a
	// Pod's) or more than one "/" (an endpoint workload's), which no
	// "<namespace>/<hostname>" does.
	slices.SortFunc(s.items, func(a, b model.Resource) int { return strings.Compare(a.Name, b.Name) })
	s.byName = make(map[string]int, len(s.items))
	for i, it := range s.items {
		s.byName[it.Name] = i
	}
}

// anyAddress is an Address about to be marshalled.
type anyAddress struct{ msg proto.Message }

// marshal encodes deterministically: a workload's services are a map, and
// the same content must give the same bytes, or every push would look
// like a change to the server's per-resource versions.
func (a *anyAddress) marshal() (*anypb.Any, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(a.msg)
	if err != nil {
		return nil, err
	}
	return &anypb.Any{TypeUrl: AddressType, Value: b}, nil
}
