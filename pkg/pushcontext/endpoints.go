package pushcontext

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// endpointIndex holds one swappable entry per service, aligned with
// serviceIndex.all. Swapping a slot's entry is the endpoint fast path: it
// touches nothing else.
type endpointIndex struct {
	slots []endpointSlot
	// wdsVersion counts the fast-path updates that changed endpoints
	// WDS is made of (WDSReadsEndpoints): the snapshot stays the same
	// object, so WDS needs something else to tell it changed.
	wdsVersion atomic.Uint64
}

type endpointSlot struct {
	entry atomic.Pointer[endpointEntry]
}

// endpointEntry is the immutable endpoint view of one service. Only lazy, a
// cache of label sets no rule declared, fills in after publication.
type endpointEntry struct {
	service *model.Service
	version uint64
	// read is the store's list the entry was made from, which later reads
	// are compared with; all is that list as proxies get it, with MTLS
	// cleared where workload policies disable mutual TLS
	// (autoMTLSEndpoints), and usually the very same slice.
	read []*model.Endpoint
	all  []*model.Endpoint
	// byPort is aligned with service.Ports; nil when no endpoint serves any.
	byPort  [][]*model.Endpoint
	subsets []subsetEndpoints // sorted by key
	lazy    sync.Map          // labelKey -> [][]*model.Endpoint
	// identities are the SPIFFE identities of the workloads behind the
	// endpoints.
	identities WorkloadIdentities
	// podless are the endpoints that name no Pod, nil for most services.
	podless []*model.Endpoint
}

type subsetEndpoints struct {
	subsetSpec
	byPort [][]*model.Endpoint
}

// entryBuilder makes endpoint entries. A full Build carves them, their port
// lists and the endpoint arrays out of a few large allocations; the memory
// of a chunk lives as long as any entry cut from it, which is bounded
// because the next full Build replaces every entry. A zero entryBuilder
// allocates each entry on its own, as UpdateEndpoints wants.
type entryBuilder struct {
	entries []endpointEntry
	lists   [][]*model.Endpoint
	eps     []*model.Endpoint
	// portOf is scratch: the service port index of each endpoint, or -1.
	portOf []int32
	// chunk sizes the next endpoint and list chunks; 0 disables chunking.
	chunk int
	// trustDomain names the endpoints' identities.
	trustDomain string
	// peerAuthn says which endpoints auto mTLS must send plaintext.
	peerAuthn *peerAuthnIndex
}

func newEntryBuilder(entries int, trustDomain string, peerAuthn *peerAuthnIndex) *entryBuilder {
	return &entryBuilder{entries: make([]endpointEntry, entries), chunk: 4096, trustDomain: trustDomain, peerAuthn: peerAuthn}
}

func (b *entryBuilder) newEntry() *endpointEntry {
	if len(b.entries) == 0 {
		return &endpointEntry{}
	}
	e := &b.entries[0]
	b.entries = b.entries[1:]
	return e
}

func (b *entryBuilder) newLists(n int) [][]*model.Endpoint {
	if b.chunk == 0 || n > b.chunk {
		return make([][]*model.Endpoint, n)
	}
	if len(b.lists) < n {
		b.lists = make([][]*model.Endpoint, b.chunk)
	}
	out := b.lists[:n:n]
	b.lists = b.lists[n:]
	return out
}

func (b *entryBuilder) newEndpoints(n int) []*model.Endpoint {
	if b.chunk == 0 || n > b.chunk {
		return make([]*model.Endpoint, n)
	}
	if len(b.eps) < n {
		b.eps = make([]*model.Endpoint, b.chunk*4)
	}
	out := b.eps[:n:n]
	b.eps = b.eps[n:]
	return out
}

func (b *entryBuilder) build(svc *model.Service, eps []*model.Endpoint, subsets []subsetSpec, version uint64) *endpointEntry {
	e := b.newEntry()
	e.service, e.version, e.read = svc, version, eps
	eps = b.peerAuthn.autoMTLSEndpoints(eps)
	e.all = eps
	e.identities = identitiesOf(eps, b.trustDomain)
	e.podless = podless(eps)
	b.indexPorts(svc.Ports, eps)
	e.byPort = b.split(len(svc.Ports), eps, nil)
	if len(subsets) > 0 {
		e.subsets = make([]subsetEndpoints, len(subsets))
		for i := range subsets {
			e.subsets[i] = subsetEndpoints{subsetSpec: subsets[i], byPort: b.split(len(svc.Ports), eps, subsets[i].match)}
		}
	}
	return e
}

// indexPorts fills portOf for eps.
func (b *entryBuilder) indexPorts(ports []*model.Port, eps []*model.Endpoint) {
	if cap(b.portOf) < len(eps) {
		b.portOf = make([]int32, len(eps), max(len(eps), 64))
	}
	b.portOf = b.portOf[:len(eps)]
	for i, ep := range eps {
		b.portOf[i] = int32(portIndexByName(ports, ep.ServicePortName))
	}
}

// split groups the endpoints that carry all of labels by the service port
// they serve (per portOf), in one backing array. Endpoints of unknown ports
// are left out. It returns nil when no endpoint qualifies.
func (b *entryBuilder) split(ports int, eps []*model.Endpoint, labels []labelPair) [][]*model.Endpoint {
	if ports == 0 || len(eps) == 0 {
		return nil
	}
	var countsBuf [8]int
	var counts []int
	if ports <= len(countsBuf) {
		counts = countsBuf[:ports]
	} else {
		counts = make([]int, ports)
	}
	total := 0
	for i, ep := range eps {
		if p := b.portOf[i]; p >= 0 && hasLabels(ep.Labels, labels) {
			counts[p]++
			total++
		}
	}
	if total == 0 {
		return nil
	}
	lists := b.newLists(ports)
	if total == len(eps) {
		// Every endpoint serves one port: share the list instead of copying.
		for i, c := range counts {
			if c == total {
				lists[i] = eps[:len(eps):len(eps)]
				return lists
			}
		}
	}
	backing := b.newEndpoints(total)
	offset := 0
	for i, c := range counts {
		if c > 0 {
			lists[i] = backing[offset : offset : offset+c]
		}
		offset += c
	}
	for i, ep := range eps {
		if p := b.portOf[i]; p >= 0 && hasLabels(ep.Labels, labels) {
			lists[p] = append(lists[p], ep)
		}
	}
	return lists
}

// sameSubsets reports whether an entry was built for exactly these label sets.
func (e *endpointEntry) sameSubsets(subsets []subsetSpec) bool {
	if len(e.subsets) != len(subsets) {
		return false
	}
	for i := range subsets {
		if e.subsets[i].key != subsets[i].key {
			return false
		}
	}
	return true
}

// buildEndpointIndex makes a new index for services. With prev, an entry of
// prev for the same *model.Service is reused when its subsets still match,
// its endpoints are not listed in reread and peerAuthn leaves their auto
// mTLS as it was; if only its subsets or auto mTLS differ, it is rebuilt
// from its endpoints without reading the store.
func buildEndpointIndex(store model.Store, services *serviceIndex, resolution *resolutionIndex, prev *PushContext,
	reread map[model.NamespacedName]struct{}, versions *versionSource, info *BuildInfo, trustDomain string,
	peerAuthn *peerAuthnIndex,
) *endpointIndex {
	idx := &endpointIndex{slots: make([]endpointSlot, len(services.all))}
	var b *entryBuilder
	if prev == nil {
		b = newEntryBuilder(len(services.all), trustDomain, peerAuthn)
	} else {
		// Incremental builds usually make few entries; chunks would pin
		// memory for little gain.
		b = &entryBuilder{trustDomain: trustDomain, peerAuthn: peerAuthn}
	}
	// keeps reports whether an entry of prev still says what peerAuthn
	// would: only selector policies in the service's namespace, before or
	// after, can have changed it.
	keeps := func(old *endpointEntry) bool {
		if prev.peerAuthn == peerAuthn || (!prev.peerAuthn.hasSelected(old.service.Namespace) && !peerAuthn.hasSelected(old.service.Namespace)) {
			return true
		}
		return sameEndpoints(old.all, peerAuthn.autoMTLSEndpoints(old.read))
	}
	for ord, svc := range services.all {
		subsets := resolution.byService[ord].subsets
		old := prev.entryFor(svc, int32(ord), services)
		var e *endpointEntry
		switch _, mustRead := reread[svc.Key()]; {
		case old == nil:
			e = b.build(svc, store.Endpoints(svc.Key()), subsets, versions.next())
			info.EndpointEntriesRead++
		case mustRead:
			eps := store.Endpoints(svc.Key())
			if sameEndpoints(old.read, eps) && old.sameSubsets(subsets) && keeps(old) {
				e = old
				info.EndpointEntriesReused++
			} else {
				e = b.build(svc, eps, subsets, versions.next())
				info.EndpointEntriesRead++
			}
		case old.sameSubsets(subsets) && keeps(old):
			e = old
			info.EndpointEntriesReused++
		default:
			e = b.build(svc, old.read, subsets, versions.next())
			info.EndpointEntriesResubset++
		}
		idx.slots[ord].entry.Store(e)
	}
	return idx
}

// entryFor returns prev's current entry for svc if prev indexed the very
// same service object, else nil. ord is svc's position in services.
func (pc *PushContext) entryFor(svc *model.Service, ord int32, services *serviceIndex) *endpointEntry {
	if pc == nil {
		return nil
	}
	if pc.services != services {
		var ok bool
		if ord, ok = pc.services.byHost[svc.Hostname]; !ok {
			return nil
		}
	}
	e := pc.endpoints.slots[ord].entry.Load()
	if e == nil || e.service != svc {
		return nil
	}
	return e
}

// Endpoints returns the endpoints of service hostname that serve service port
// port (endpoint.ServicePortName == the port's name), restricted to those
// whose labels contain all of subsetLabels. Health is not filtered. The
// result is shared: never mutate it. Label sets that some DestinationRule
// declares for the host are precomputed; others are computed once and cached.
func (pc *PushContext) Endpoints(hostname string, port uint32, subsetLabels map[string]string) []*model.Endpoint {
	ord, ok := pc.services.byHost[hostname]
	if !ok {
		return nil
	}
	e := pc.endpoints.slots[ord].entry.Load()
	pi := portIndex(e.service.Ports, port)
	if pi < 0 {
		return nil
	}
	if len(subsetLabels) == 0 {
		return listAt(e.byPort, pi)
	}
	for i := range e.subsets {
		if maps.Equal(e.subsets[i].labels, subsetLabels) {
			return listAt(e.subsets[i].byPort, pi)
		}
	}
	key := labelKey(subsetLabels)
	if cached, ok := e.lazy.Load(key); ok {
		return listAt(cached.([][]*model.Endpoint), pi)
	}
	var b entryBuilder
	b.indexPorts(e.service.Ports, e.all)
	lists := b.split(len(e.service.Ports), e.all, labelPairs(subsetLabels))
	cached, _ := e.lazy.LoadOrStore(key, lists)
	return listAt(cached.([][]*model.Endpoint), pi)
}

// AllEndpointsMTLS reports whether service hostname has endpoints for
// service port port and auto mTLS would send every one of them mutual TLS:
// each carries the tlsMode label, and no workload policy of its own
// disables mutual TLS on its port (Endpoint.MTLS as EDS sends it). Health
// is not looked at: the endpoints not ready now are the ones that may
// serve next.
//
// An original-destination cluster (DestinationRule loadBalancer
// PASSTHROUGH) goes to whatever address the client dialled, with no
// endpoint metadata to choose a transport socket by, so it can only send
// mutual TLS to all or to none; Istio sends it when every instance of the
// service port has a sidecar (BestEffortInferServiceMTLSMode), and so does
// envoygen, by this.
func (pc *PushContext) AllEndpointsMTLS(hostname string, port uint32) bool {
	return allMTLS(pc.Endpoints(hostname, port, nil))
}

func allMTLS(eps []*model.Endpoint) bool {
	for _, ep := range eps {
		if !ep.MTLS {
			return false
		}
	}
	return len(eps) > 0
}

// sameMTLSPorts reports whether AllEndpointsMTLS says the same of every
// port of two entries of one service.
func (e *endpointEntry) sameMTLSPorts(o *endpointEntry) bool {
	for i := range e.service.Ports {
		if allMTLS(listAt(e.byPort, i)) != allMTLS(listAt(o.byPort, i)) {
			return false
		}
	}
	return true
}

// EndpointsVersion returns a value that changes whenever the endpoint entry
// of hostname is replaced, so generators can cache per host. 0 if unknown.
func (pc *PushContext) EndpointsVersion(hostname string) uint64 {
	ord, ok := pc.services.byHost[hostname]
	if !ok {
		return 0
	}
	return pc.endpoints.slots[ord].entry.Load().version
}

// UpdateEndpoints is the fast path for endpoint-only changes: it re-reads the
// given services' endpoints from the store and swaps in new entries for the
// services whose endpoints differ, touching nothing else. It returns the
// hostnames whose endpoints changed, in the order given. Services this
// snapshot does not know are skipped: the Build that adds them reads their
// endpoints. It must run on the goroutine that runs Build. A snapshot that
// reused its predecessor's endpoint index shares its slots, so an update
// through either is seen by both.
func (pc *PushContext) UpdateEndpoints(store model.Store, services []model.NamespacedName) EndpointUpdate {
	var update EndpointUpdate
	for _, name := range services {
		ord, ok := pc.services.byName[name]
		if !ok {
			continue
		}
		slot := &pc.endpoints.slots[ord]
		old := slot.entry.Load()
		eps := store.Endpoints(name)
		if sameEndpoints(old.read, eps) {
			continue
		}
		b := entryBuilder{trustDomain: pc.opts.TrustDomain, peerAuthn: pc.peerAuthn}
		e := b.build(old.service, eps, pc.resolution.byService[ord].subsets, pc.versions.next())
		slot.entry.Store(e)
		update.Hosts = append(update.Hosts, old.service.Hostname)
		if e.identities != old.identities {
			update.IdentitiesChanged = append(update.IdentitiesChanged, name)
		}
		if pc.MayPassThrough(old.service.Hostname) && !old.sameMTLSPorts(e) {
			update.MTLSChanged = append(update.MTLSChanged, name)
		}
		if wdsReads(old) || wdsReads(e) {
			update.WDSChanged = true
			pc.endpoints.wdsVersion.Add(1)
		}
	}
	return update
}

// EndpointUpdate is what UpdateEndpoints changed.
type EndpointUpdate struct {
	// Hosts are the hostnames whose endpoints changed.
	Hosts []string
	// IdentitiesChanged are the services whose set of workload identities
	// changed with them. Clusters verify servers against that set, so
	// these changes need more than EDS: Istio pushes them in full too.
	IdentitiesChanged []model.NamespacedName
	// MTLSChanged are the services with original-destination clusters
	// (MayPassThrough) where, for some port, whether every endpoint takes
	// mutual TLS (AllEndpointsMTLS) changed. Such a cluster sends mutual
	// TLS or not by it, so these changes need more than EDS too.
	MTLSChanged []model.NamespacedName
	// WDSChanged says that WDS changed too: it reads, or read, the
	// endpoints of a service whose endpoints changed.
	WDSChanged bool
}

func listAt(lists [][]*model.Endpoint, i int) []*model.Endpoint {
	if i < len(lists) {
		return lists[i]
	}
	return nil
}

// portIndex finds a port by number. Services have a handful of ports, so a
// scan beats a binary search and does not depend on the ports being sorted.
func portIndex(ports []*model.Port, number uint32) int {
	for i, p := range ports {
		if p.Port == number {
			return i
		}
	}
	return -1
}

func portIndexByName(ports []*model.Port, name string) int {
	for i, p := range ports {
		if p.Name == name {
			return i
		}
	}
	return -1
}

// labelPair is one label a subset requires.
type labelPair struct{ key, value string }

func labelPairs(labels map[string]string) []labelPair {
	if len(labels) == 0 {
		return nil
	}
	out := make([]labelPair, 0, len(labels))
	for k, v := range labels {
		out = append(out, labelPair{k, v})
	}
	return out
}

// hasLabels reports whether have contains every label of want.
func hasLabels(have map[string]string, want []labelPair) bool {
	for _, l := range want {
		if got, ok := have[l.key]; !ok || got != l.value {
			return false
		}
	}
	return true
}

// labelKey renders a label set canonically: sorted "k=v" pairs joined by
// ",". Kubernetes label keys and values cannot contain either separator.
func labelKey(labels map[string]string) string {
	if len(labels) == 0 {
		return ""
	}
	var buf [8]string
	keys := buf[:0]
	size := 0
	for k, v := range labels {
		keys = append(keys, k)
		size += len(k) + len(v) + 2
	}
	slices.Sort(keys)
	var b strings.Builder
	b.Grow(size)
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(labels[k])
	}
	return b.String()
}

// sameEndpoints compares two endpoint lists by content, so a source that
// re-creates identical endpoints does not trigger a push.
func sameEndpoints(a, b []*model.Endpoint) bool {
	return slices.EqualFunc(a, b, func(x, y *model.Endpoint) bool {
		if x == y {
			return true
		}
		if x == nil || y == nil {
			return false
		}
		return x.Address == y.Address && x.Port == y.Port && x.ServicePortName == y.ServicePortName &&
			x.Locality == y.Locality && x.Health == y.Health && x.MTLS == y.MTLS && x.FromPod == y.FromPod &&
			x.ServiceAccount == y.ServiceAccount &&
			x.Namespace == y.Namespace && maps.Equal(x.Labels, y.Labels)
	})
}
