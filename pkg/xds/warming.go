package xds

import (
	"slices"
	"sync"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// Envoy warms a cluster or listener that a CDS or LDS response adds or
// changes: the new version is not used until the resource it depends on
// arrives in a response after that update, the ClusterLoadAssignment of an
// EDS cluster or the RouteConfiguration of an HCM that uses RDS. Until then
// the old version keeps serving, and with initial_fetch_timeout 0 it waits
// forever. Envoy's re-request for the dependency after such an update may
// name exactly what it already holds, which looks like an ACK, and in delta
// it sends none at all. So the server itself follows every such CDS or LDS
// response with the dependencies, changed or not.
// https://www.envoyproxy.io/docs/envoy/latest/api-docs/xds_protocol#resource-warming

// dependentType is the type whose resources warm the resources of typeURL,
// "" when it has none.
func dependentType(typeURL string) string {
	switch typeURL {
	case ClusterType:
		return EndpointType
	case ListenerType:
		return RouteType
	}
	return ""
}

// changedOrNamed keeps the items, gen's or some of them, that differ from
// what the client holds in w or whose names are in names (sorted; nil keeps
// only the changed ones).
func changedOrNamed(w *watch, gen *generation, items []generated, names []string) []generated {
	if gen != nil && len(items) == len(gen.items) {
		if base, whole := w.sent.whole(); whole {
			return gen.changedOrNamed(base, names)
		}
		if w.sent.base != nil {
			return w.sent.changedIn(gen, names)
		}
	}
	out := items[:0:0]
	for _, it := range items {
		_, named := slices.BinarySearch(names, it.name)
		if prev, ok := w.sent.get(it.name); named || !ok || prev.version != it.version {
			out = append(out, it)
		}
	}
	return out
}

// markWarming records, on the watch of the type that the resources parent
// is about to send depend on, the names the client will wait for: those of
// the sent resources that differ from what it holds. Call it before
// parent.sent records the response. The next response of the dependent
// type carries them whether or not they changed: within the same push when
// the push regenerates that type anyway, else right after it
// (flushWarming). A client that does not watch the dependent type yet is
// answered in full on its first request.
func (c *connection) markWarming(parent *watch, gen *generation, sending []generated, st *pushState) {
	depType := dependentType(parent.typeURL)
	if depType == "" {
		return
	}
	dep := c.watches[depType]
	if dep == nil || !dep.subscribed() {
		return
	}
	changed := changedOrNamed(parent, gen, sending, nil)
	if len(changed) == 0 {
		return
	}
	names := slices.Clone(dep.warming)
	for _, it := range changed {
		if parent.typeURL == ClusterType {
			// Only an EDS cluster waits, for the assignment it names. A
			// DNS cluster that was an EDS cluster is still in the EDS
			// subscription until the client has applied this response.
			if name, ok := edsAssignment(it.name, it.resource.GetValue()); ok {
				names = append(names, name)
			}
			continue
		}
		names = append(names, st.routesOf(it)...)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if !dep.resource.Wildcard {
		names = slices.DeleteFunc(names, func(n string) bool {
			_, found := slices.BinarySearch(dep.resource.ResourceNames, n)
			return !found
		})
	}
	c.mu.Lock()
	dep.warming = names
	c.mu.Unlock()
}

// resend makes the next response of w carry the resources named, which
// its client may no longer hold, whether or not they changed; the caller
// holds c.mu.
func (w *watch) resend(names []string) {
	if len(names) == 0 {
		return
	}
	w.warming = append(slices.Clip(w.warming), names...)
	slices.Sort(w.warming)
	w.warming = slices.Compact(w.warming)
}

// dropUnservable forgets the names w's client waits for when the generator
// produced none of them (a name that is no load assignment, say): nothing
// can be sent for them, and keeping them would regenerate w on every push.
func (c *connection) dropUnservable(w *watch) {
	c.mu.Lock()
	w.warming = nil
	c.mu.Unlock()
}

// pendingWarming lists the watched types, in push order, whose clients
// still wait for resources that markWarming recorded.
func (c *connection) pendingWarming() []*watch {
	var out []*watch
	for _, typeURL := range c.order {
		if w := c.watches[typeURL]; len(w.warming) > 0 {
			out = append(out, w)
		}
	}
	return out
}

// routeRefs caches, per served version, the RDS names each listener's
// connection managers use, by the listener's content hash: identical
// proxies get identical listeners, so each is parsed once.
type routeRefs struct{ m sync.Map }

// routesOf lists the RouteConfiguration names that listener it fetches
// over RDS (filter chains, the default chain and gRPC's API listener).
func (st *pushState) routesOf(it generated) []string {
	if v, ok := st.routeRefs.m.Load(it.hash); ok {
		return v.([]string)
	}
	var names []string
	l := &listenerv3.Listener{}
	if err := proto.Unmarshal(it.resource.GetValue(), l); err == nil {
		addRDS := func(m *hcm.HttpConnectionManager) {
			if name := m.GetRds().GetRouteConfigName(); name != "" {
				names = append(names, name)
			}
		}
		if api := l.GetApiListener().GetApiListener(); api != nil {
			m := &hcm.HttpConnectionManager{}
			if api.UnmarshalTo(m) == nil {
				addRDS(m)
			}
		}
		chains := l.GetFilterChains()
		if d := l.GetDefaultFilterChain(); d != nil {
			chains = append(slices.Clip(chains), d)
		}
		for _, fc := range chains {
			for _, f := range fc.GetFilters() {
				m := &hcm.HttpConnectionManager{}
				if tc := f.GetTypedConfig(); tc != nil && tc.MessageIs(m) && tc.UnmarshalTo(m) == nil {
					addRDS(m)
				}
			}
		}
	}
	st.routeRefs.m.Store(it.hash, names)
	return names
}

// warmsInstead reports whether a push's request for w cannot carry what
// w's client waits for: an incremental EDS push regenerates only the
// endpoints that changed, not the assignment of a cluster that the same
// push changed for other reasons (a load balancer, say). A warming
// response goes in its place: it holds both, what changed and what is
// awaited.
func warmsInstead(req *model.PushRequest, w *watch) bool {
	return !req.Full && len(w.warming) > 0
}

// warmingRequest regenerates a type only to send what its clients wait
// for: a complete generation, which identical proxies of the served
// version share, so that re-sent resources are marshalled once rather than
// per proxy.
func warmingRequest(start time.Time) *model.PushRequest {
	return &model.PushRequest{Full: true, Start: start}
}
