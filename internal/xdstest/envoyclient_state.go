package xdstest

import (
	"maps"
	"slices"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
)

// envoyState is the client's model of Envoy's xDS state machine. Every method
// runs with mu held: the receive loop, the initial_fetch_timeout timers and
// the accessors all take it.
//
// Envoy's gRPC mux sends requests as follows, and this model does the same:
//
//   - SotW (grpc_mux_impl.cc): every watch added or removed queues a request
//     for its type, with the full set of names, the last accepted
//     version_info and the last received nonce, even when the set of names
//     is unchanged. A cluster instance has its own EDS watch, so a new or
//     changed EDS cluster re-requests EDS, and so does the removal of the
//     old version once the new one is warm. While a response is processed,
//     requests of its own type are held and merged into its ACK/NACK, and
//     CDS (LDS) processing holds EDS (RDS) requests too, sending them
//     before the CDS (LDS) ACK (cds_api_helper.cc, lds_api.cc). "Resource
//     updates" in https://www.envoyproxy.io/docs/envoy/latest/api-docs/xds_protocol
//     shows the resulting EDS request at the old version.
//   - Delta (new_grpc_mux_impl.cc, watch_map.cc): a request is sent only
//     when the union of watched names changes, as resource_names_subscribe
//     and resource_names_unsubscribe increments. A changed cluster whose EDS
//     name is already watched sends nothing: the server must push its
//     ClusterLoadAssignment unasked ("Incremental xDS" in the same page).
//     ACKs carry the nonce and the pending increments of their type.
//
// A route configuration or secret subscription is shared by every listener
// or cluster that names it, as Envoy shares RdsRouteConfigSubscription and
// SDS providers (Init::SharedTargetImpl): only a newly named one is
// requested, and a consumer created after it arrived is ready at once.
//
// A stream that breaks loses nothing but its nonces; connect describes what
// a new stream starts with.
type envoyState struct {
	tr      transport // nil while disconnected
	delta   bool
	mu      *sync.Mutex
	begun   time.Time
	stopped bool

	types map[string]*typeState
	order []string // subscribed types, in the order their subscriptions began
	dirty []string // types with a request due, in the order they became due

	clusters  map[string]*warmEntry
	listeners map[string]*warmEntry
	subs      map[subKey]*sharedSub
	ldsSince  time.Time // zero until LDS is subscribed

	requests []SentRequest
	nacks    []Nack
	err      error
	changed  chan struct{} // closed and replaced on every change
}

type typeState struct {
	url       string
	wildcard  bool
	started   bool // a request was sent, on any stream
	onStream  bool // a request was sent on the current stream
	responded bool // a response was processed
	version   string
	nonce     string   // of the last response on the current stream
	sent      []string // delta: the names subscribed on the current stream
	// held is, in delta, the version of every resource the client holds
	// (see track): what a new stream's first request of the type reports
	// in initial_resource_versions.
	held map[string]string
}

// warmEntry is a named cluster or listener: the version serving traffic and
// the version warming to replace it.
type warmEntry struct{ active, warming *resourceVersion }

type resourceVersion struct {
	kind     string // "Cluster" or "Listener"
	name     string
	res      proto.Message
	since    time.Time
	eds      *edsWatch    // clusters fetching EDS over ADS
	deps     []*sharedSub // route configurations and secrets
	clusters []string     // clusters a listener's tcp_proxy or inline routes name
}

type edsWatch struct {
	dependency
	cla   *endpointv3.ClusterLoadAssignment
	done  bool // received, or given up on by timeout or removal
	dead  bool
	timer *time.Timer
}

type subKey struct{ typeURL, name string }

type sharedSub struct {
	dependency
	value proto.Message
	done  bool
	dead  bool
	refs  int
	timer *time.Timer
}

// newEnvoyState is a client that has subscribed to CDS, Envoy's first
// request on an ADS stream, and is not connected yet.
func newEnvoyState(delta bool, mu *sync.Mutex) *envoyState {
	s := &envoyState{
		delta: delta, mu: mu, begun: time.Now(),
		types:    map[string]*typeState{},
		clusters: map[string]*warmEntry{}, listeners: map[string]*warmEntry{},
		subs:    map[subKey]*sharedSub{},
		changed: make(chan struct{}),
	}
	s.markDirty(resourcev3.ClusterType).wildcard = true
	return s
}

// connect makes tr the client's stream and sends its first requests: one
// for every type subscribed so far, in the order the subscriptions began
// (GrpcMuxImpl::onStreamEstablished, grpc_mux_impl.cc;
// NewGrpcMuxImpl::whoWantsToSendDiscoveryRequest, new_grpc_mux_impl.cc).
// On the first stream that is CDS alone.
//
//   - SotW: each carries the node (first request only), the full set of
//     names and the version_info last accepted, and no response_nonce: "the
//     nonce is valid only in the context of an individual xDS stream; it
//     does not survive stream restarts", while "the client's initial
//     request on the new stream should indicate the most recent version
//     seen by the client on the previous stream" ("Basic Protocol Overview"
//     and "ACK/NACK and resource type instance version",
//     https://www.envoyproxy.io/docs/envoy/latest/api-docs/xds_protocol).
//     Envoy clears the nonces and keeps the version (clearNonce,
//     grpc_mux_impl.cc). A type whose watches are all gone is requested
//     too, with no names.
//   - Delta: "the reconnecting client must provide the server with all
//     resource names it is interested in" and may list what it holds in
//     initial_resource_versions ("Incremental xDS", same page). Envoy
//     subscribes again to every name it watches, or sends a legacy wildcard
//     request (no names) when the wildcard is all it watches, and lists
//     every resource it holds at its version; a type it watches nothing of
//     sends nothing (DeltaSubscriptionState::getNextRequestAckless and
//     subscriptionUpdatePending, delta_subscription_state.cc).
//
// Nothing held is dropped: the responses replace it as on the old stream
// (a SotW CDS or LDS response removes what it leaves out) and warming
// applies to what they change.
func (s *envoyState) connect(tr transport) {
	s.tr, s.err = tr, nil
	for _, ts := range s.types {
		ts.nonce, ts.onStream = "", false
	}
	s.dirty = append(s.dirty[:0], s.order...)
	s.flush("", "")
	s.notify()
}

// disconnect leaves the client without a stream (see EnvoyClient.Disconnect).
func (s *envoyState) disconnect() { s.tr = nil }

// current reports whether tr is the client's stream.
func (s *envoyState) current(tr transport) bool { return s.tr == tr }

func (s *envoyState) handle(resp *response) {
	defer s.notify()
	ts := s.types[resp.typeURL]
	if ts == nil || !ts.started {
		// Envoy ignores a type it has not subscribed to (grpc_mux_impl.cc).
		return
	}
	ts.nonce, ts.responded = resp.nonce, true
	if !s.delta && !ts.wildcard && len(s.wanted(ts)) == 0 {
		// A SotW response of a type no watch is left on is not processed
		// (GrpcMuxImpl::onDiscoveryResponse, grpc_mux_impl.cc): with no
		// resources Envoy takes its version and sends nothing; with
		// resources it re-requests at the previous version with the new
		// nonce and no error_detail ("send a NACK (by not updating the
		// version)").
		if len(resp.resources) == 0 {
			ts.version = resp.version
			s.flush("", "")
		} else {
			s.flush(resp.typeURL, "")
		}
		return
	}
	decoded, err := decodeResponse(resp)
	if err != nil {
		s.nacks = append(s.nacks, Nack{TypeURL: resp.typeURL, Version: resp.version, Nonce: resp.nonce, Error: err.Error()})
		// A rejected first CDS response still ends cluster initialization,
		// which "waits for one response (or failure)"
		// (https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/operations/init).
		s.settle()
		s.flush(resp.typeURL, err.Error())
		return
	}
	ts.version = resp.version
	if s.delta {
		s.track(ts, resp)
	}
	switch resp.typeURL {
	case resourcev3.ClusterType:
		s.applyTop(s.clusters, "Cluster", decoded, resp.removed)
	case resourcev3.ListenerType:
		s.applyTop(s.listeners, "Listener", decoded, resp.removed)
	case resourcev3.EndpointType:
		s.applyEndpoints(decoded, resp.removed)
	default:
		s.applyShared(resp.typeURL, decoded, resp.removed)
	}
	s.settle()
	s.flush(resp.typeURL, "")
}

// track records the version of every resource an accepted delta response
// brings, as Envoy's DeltaSubscriptionState does for
// initial_resource_versions (handleGoodResponse, delta_subscription_state.cc):
// all of them for a wildcard subscription, else those of names watched
// (the others are ignored). A removed resource is forgotten: a name still
// watched then "waits for the server" and is left out of
// initial_resource_versions too. Names no longer watched are forgotten by
// request.
func (s *envoyState) track(ts *typeState, resp *response) {
	wanted := s.wanted(ts)
	for _, r := range resp.resources {
		if ts.wildcard || slices.Contains(wanted, r.name) {
			if ts.held == nil {
				ts.held = map[string]string{}
			}
			ts.held[r.name] = r.version
		}
	}
	for _, name := range resp.removed {
		delete(ts.held, name)
	}
}

// applyTop applies a CDS or LDS update, blocking an unchanged one by its
// hash as Envoy does:
//
//   - A cluster identical to the warming version is skipped; identical to
//     the active version, it is skipped only when nothing warms. Otherwise
//     a new warming instance replaces the warming one, even when it is
//     identical to the active version, and it must fetch its endpoints
//     again (ClusterManagerImpl::addOrUpdateCluster, cluster_manager_impl.cc:
//     "Always proceed if the cluster is different from the existing warming
//     cluster", envoyproxy/envoy#14598).
//   - A listener identical to the active version while another one warms
//     drops the warming one ("The listener should be updated back to its
//     original state and the warming listener should be removed",
//     ListenerManagerImpl::addOrUpdateListenerInternal,
//     listener_manager_impl.cc); identical to the warming or (with nothing
//     warming) the active version, it is skipped.
//
// In SotW, a cluster or listener missing from the response is removed
// ("Deleting Resources", https://www.envoyproxy.io/docs/envoy/latest/api-docs/xds_protocol).
func (s *envoyState) applyTop(entries map[string]*warmEntry, kind string, decoded map[string]proto.Message, removed []string) {
	for name, m := range decoded {
		e := entries[name]
		if e == nil {
			e = &warmEntry{}
			entries[name] = e
		}
		sameActive := e.active != nil && proto.Equal(e.active.res, m)
		switch {
		case e.warming != nil && proto.Equal(e.warming.res, m):
			continue
		case e.warming == nil && sameActive:
			continue
		case kind == "Listener" && sameActive:
			s.destroy(e.warming)
			e.warming = nil
			continue
		}
		// The new version is built before the one it replaces goes, as
		// Envoy builds the new listener or cluster before it drops the
		// warming one (ListenerManagerImpl::addOrUpdateListenerInternal,
		// ClusterManagerImpl::addOrUpdateCluster): an SDS secret or route
		// configuration both use stays subscribed, with what it holds, and
		// the new version does not wait for a response the server owes
		// nobody.
		replaced := e.warming
		e.warming = s.create(kind, name, m)
		s.destroy(replaced)
	}
	if !s.delta {
		for name := range entries {
			if _, ok := decoded[name]; !ok {
				removed = append(removed, name)
			}
		}
	}
	for _, name := range removed {
		if e := entries[name]; e != nil {
			s.destroy(e.active)
			s.destroy(e.warming)
			delete(entries, name)
		}
	}
}

// applyEndpoints gives every cluster instance watching a name its load
// assignment. A delta removal of a watched name tells a warming cluster
// that the assignment does not exist, and Envoy's EDS cluster then
// initializes with no endpoints (eds.cc; "Knowing When a Requested Resource
// Does Not Exist", https://www.envoyproxy.io/docs/envoy/latest/api-docs/xds_protocol);
// an active cluster keeps the endpoints it has (EdsClusterImpl::validateUpdateSize
// only ends pre-init). In SotW an assignment missing from a response is not
// removed either ("When are resources considered removed": only LDS and
// CDS responses carry the whole state). Assignments nobody watches, and
// delta removals of names nobody watches, are ignored and the response is
// ACKed: "We are not subscribed to wildcard, so we only take resources that
// we explicitly requested and ignore the others" (DeltaSubscriptionState::
// handleGoodResponse, delta_subscription_state.cc; WatchMap delivers to
// interested watches only, watch_map.cc).
func (s *envoyState) applyEndpoints(decoded map[string]proto.Message, removed []string) {
	for _, inst := range s.instances(s.clusters) {
		w := inst.eds
		if w == nil {
			continue
		}
		if m, ok := decoded[w.name]; ok {
			w.cla = m.(*endpointv3.ClusterLoadAssignment)
			w.finish()
		} else if slices.Contains(removed, w.name) {
			w.finish()
		}
	}
}

// applyShared stores route configurations and secrets that are subscribed;
// "the client will silently ignore any supplied resources that were not
// explicitly requested" ("How the client specifies what resources to
// return", https://www.envoyproxy.io/docs/envoy/latest/api-docs/xds_protocol).
// Delta removals are ignored, as Envoy's RDS does: a route configuration
// still waited for stays so, until its initial_fetch_timeout
// (RdsRouteConfigSubscription::onConfigUpdate, rds_route_config_subscription.cc).
// SDS ignores a removal too, keeping what it had, but "the owning resource
// (LDS/CDS) should still complete warming" (SdsApi::onConfigUpdate, sds_api.cc).
func (s *envoyState) applyShared(typeURL string, decoded map[string]proto.Message, removed []string) {
	for name, m := range decoded {
		if sub := s.subs[subKey{typeURL, name}]; sub != nil {
			sub.value = m
			sub.finish()
		}
	}
	if typeURL != resourcev3.SecretType {
		return
	}
	for _, name := range removed {
		if sub := s.subs[subKey{typeURL, name}]; sub != nil {
			sub.finish()
		}
	}
}

func (s *envoyState) create(kind, name string, m proto.Message) *resourceVersion {
	inst := &resourceVersion{kind: kind, name: name, res: m, since: time.Now()}
	if c, ok := m.(*clusterv3.Cluster); ok {
		if d, ok := edsDependency(c); ok {
			inst.eds = &edsWatch{dependency: d}
			inst.eds.timer = s.fetchTimer(d, func() bool { return inst.eds.expire() })
			s.markDirty(resourcev3.EndpointType)
		}
	}
	deps, clusters := referencesOf(m)
	for _, d := range deps {
		inst.deps = append(inst.deps, s.acquire(d))
	}
	if kind == "Listener" {
		inst.clusters = clusters
	}
	return inst
}

func (s *envoyState) destroy(inst *resourceVersion) {
	if inst == nil {
		return
	}
	if w := inst.eds; w != nil {
		w.dead = true
		stopTimer(w.timer)
		s.markDirty(resourcev3.EndpointType)
	}
	for _, sub := range inst.deps {
		if sub.refs--; sub.refs == 0 {
			sub.dead = true
			stopTimer(sub.timer)
			delete(s.subs, subKey{sub.typeURL, sub.name})
			s.markDirty(sub.typeURL)
		}
	}
}

func (s *envoyState) acquire(d dependency) *sharedSub {
	k := subKey{d.typeURL, d.name}
	sub := s.subs[k]
	if sub == nil {
		sub = &sharedSub{dependency: d}
		sub.timer = s.fetchTimer(d, func() bool { return sub.expire() })
		s.subs[k] = sub
		s.markDirty(d.typeURL)
	}
	sub.refs++
	return sub
}

// fetchTimer arms a subscription's initial_fetch_timeout: "The timer is
// activated when the xDS API subscription starts, and is disarmed on first
// config update or on error. 0 means no timeout"; on expiry "Envoy will move
// to the next initialization phase, even if the first config is not
// delivered yet" (ConfigSource.initial_fetch_timeout,
// https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/core/v3/config_source.proto).
// expire reports whether the expiry changed anything.
func (s *envoyState) fetchTimer(d dependency, expire func() bool) *time.Timer {
	if d.timeout <= 0 {
		return nil
	}
	return time.AfterFunc(d.timeout, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.stopped || !expire() {
			return
		}
		s.settle()
		s.flush("", "")
		s.notify()
	})
}

func (w *edsWatch) finish() { w.done = true; stopTimer(w.timer) }

func (w *edsWatch) expire() bool {
	if w.done || w.dead {
		return false
	}
	w.done = true
	return true
}

func (u *sharedSub) finish() { u.done = true; stopTimer(u.timer) }

func (u *sharedSub) expire() bool {
	if u.done || u.dead {
		return false
	}
	u.done = true
	return true
}

func stopTimer(t *time.Timer) {
	if t != nil {
		t.Stop()
	}
}

func (inst *resourceVersion) ready() bool {
	if inst.eds != nil && !inst.eds.done {
		return false
	}
	for _, sub := range inst.deps {
		if !sub.done {
			return false
		}
	}
	return true
}

// settle promotes warm instances and starts LDS once the initial clusters
// are warm. A cluster (listener) becomes active only when its load
// assignment (route configuration) and its transport sockets' secrets are
// there ("Resource warming", https://www.envoyproxy.io/docs/envoy/latest/api-docs/xds_protocol;
// "Cluster warming", https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/upstream/cluster_manager;
// https://www.envoyproxy.io/docs/envoy/latest/configuration/listeners/lds;
// https://www.envoyproxy.io/docs/envoy/latest/configuration/security/secret);
// until then the previous version keeps serving.
func (s *envoyState) settle() {
	for _, entries := range []map[string]*warmEntry{s.clusters, s.listeners} {
		for _, e := range entries {
			if e.warming != nil && e.warming.ready() {
				s.destroy(e.active)
				e.active, e.warming = e.warming, nil
			}
		}
	}
	if s.ldsSince.IsZero() && s.types[resourcev3.ClusterType].responded && !s.anyWarming(s.clusters) {
		s.ldsSince = time.Now()
		s.markDirty(resourcev3.ListenerType).wildcard = true
	}
}

func (s *envoyState) anyWarming(entries map[string]*warmEntry) bool {
	for _, e := range entries {
		if e.warming != nil {
			return true
		}
	}
	return false
}

func (s *envoyState) markDirty(typeURL string) *typeState {
	ts := s.types[typeURL]
	if ts == nil {
		ts = &typeState{url: typeURL}
		s.types[typeURL] = ts
		s.order = append(s.order, typeURL)
	}
	if !slices.Contains(s.dirty, typeURL) {
		s.dirty = append(s.dirty, typeURL)
	}
	return ts
}

// flush sends the requests that are due, then the ACK (or NACK, when
// nack is set) of the response of type ackType being processed, if any.
func (s *envoyState) flush(ackType, nack string) {
	for _, t := range s.dirty {
		if t != ackType {
			s.request(s.types[t], false, "")
		}
	}
	s.dirty = s.dirty[:0]
	if ackType != "" {
		s.request(s.types[ackType], true, nack)
	}
}

func (s *envoyState) request(ts *typeState, ack bool, nack string) {
	names := s.wanted(ts)
	if !ts.wildcard {
		// Envoy forgets the version of a name it stops watching
		// (DeltaSubscriptionState::updateSubscriptionInterest).
		for name := range ts.held {
			if _, found := slices.BinarySearch(names, name); !found {
				delete(ts.held, name)
			}
		}
	}
	if s.tr == nil {
		// Dropped: the next stream's first requests say it all (connect).
		return
	}
	r := SentRequest{At: time.Now(), TypeURL: ts.url, ErrorDetail: nack}
	if s.delta {
		if !ts.onStream {
			ts.sent = nil
			r.InitialResourceVersions = maps.Clone(ts.held)
		}
		r.Subscribe, r.Unsubscribe = missingFrom(names, ts.sent), missingFrom(ts.sent, names)
		// Only a wildcard type's first request on a stream goes out with
		// nothing to subscribe: it is the legacy wildcard request.
		if !ack && (ts.onStream || !ts.wildcard) && len(r.Subscribe)+len(r.Unsubscribe) == 0 {
			return
		}
		if ack {
			r.ResponseNonce = ts.nonce
		}
		ts.sent = names
	} else {
		if !ts.started && !ts.wildcard && len(names) == 0 {
			return
		}
		r.VersionInfo, r.ResponseNonce, r.ResourceNames = ts.version, ts.nonce, names
	}
	ts.started, ts.onStream = true, true
	s.requests = append(s.requests, r)
	if err := s.tr.send(r); err != nil {
		s.fail(err)
	}
}

// wanted is the sorted set of names a type is subscribed to (nil for a
// wildcard).
func (s *envoyState) wanted(ts *typeState) []string {
	var names []string
	switch ts.url {
	case resourcev3.ClusterType, resourcev3.ListenerType:
		return nil
	case resourcev3.EndpointType:
		for _, inst := range s.instances(s.clusters) {
			if inst.eds != nil && !slices.Contains(names, inst.eds.name) {
				names = append(names, inst.eds.name)
			}
		}
	default:
		for k := range s.subs {
			if k.typeURL == ts.url {
				names = append(names, k.name)
			}
		}
	}
	slices.Sort(names)
	return names
}

// missingFrom is the sorted names of a not in b.
func missingFrom(a, b []string) []string {
	var out []string
	for _, n := range a {
		if !slices.Contains(b, n) {
			out = append(out, n)
		}
	}
	return out
}

// instances lists the active and warming instances of entries.
func (s *envoyState) instances(entries map[string]*warmEntry) []*resourceVersion {
	var out []*resourceVersion
	for _, e := range entries {
		for _, inst := range []*resourceVersion{e.active, e.warming} {
			if inst != nil {
				out = append(out, inst)
			}
		}
	}
	return out
}

func (s *envoyState) fail(err error) {
	if s.err == nil {
		s.err = err
	}
	s.notify()
}

func (s *envoyState) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *envoyState) stopTimers() {
	s.stopped = true
	for _, inst := range append(s.instances(s.clusters), s.instances(s.listeners)...) {
		if inst.eds != nil {
			stopTimer(inst.eds.timer)
		}
	}
	for _, sub := range s.subs {
		stopTimer(sub.timer)
	}
}
