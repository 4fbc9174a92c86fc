package xds

import (
	"errors"
	"hash/maphash"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// errGenerationAbandoned is what waiters see if the generation they wait for
// never completed.
var errGenerationAbandoned = errors.New("shared generation abandoned")

// Bounds of one served version's shared generations. Beyond them,
// connections generate for themselves: slower, never wrong.
const (
	maxSharedEntries   = 8192
	maxSharedResources = 1 << 20
)

// sharedGenerations lets identical proxies share what generators build for
// them. It belongs to one pushState, so everything in it is dropped with the
// served version that produced it.
//
// Two connections share a result when the type's generator, the proxy's
// identity (see connection.identity), the subscription and, for partial EDS,
// the push plan are the same. The first connection generates; the others
// wait for it and take its result, hashes included (singleflight).
type sharedGenerations struct {
	mu        sync.Mutex
	entries   map[shareKey]*sharedResult
	resources int
}

type shareKey struct {
	gen      Generator
	typeURL  string
	identity string
	// plan is 0 for complete generations, which do not depend on the
	// request, and the plan's id for partial (endpoint-only) ones, which do.
	plan     uint64
	wildcard bool
	// names hashes the subscribed names; the entry keeps the names to rule
	// out collisions.
	names uint64
}

type sharedResult struct {
	done  chan struct{}
	names []string
	// list is the shared subscription names came from, if any: streams
	// with the same one match it without comparing names.
	list *nameList
	gen  *generation
	err  error
}

func newSharedGenerations() *sharedGenerations {
	return &sharedGenerations{entries: map[shareKey]*sharedResult{}}
}

// claim returns the entry for key and whether the caller must generate it
// (and then call finish). It returns nil when the result cannot be shared:
// the bounds are reached, or another subscription hashed to the same key.
// list is the shared subscription the names are, or nil. Streams of
// identical sidecars share one, and matching it by pointer spares
// comparing 5,000 EDS names per stream and push, a twelfth of the control
// plane's CPU under endpoint churn.
func (sg *sharedGenerations) claim(key shareKey, names []string, list *nameList) (*sharedResult, bool) {
	if list != nil {
		names = list.names
	}
	sg.mu.Lock()
	defer sg.mu.Unlock()
	if r, ok := sg.entries[key]; ok {
		if (list == nil || r.list != list) && !slices.Equal(r.names, names) {
			return nil, false
		}
		return r, false
	}
	if len(sg.entries) >= maxSharedEntries || sg.resources >= maxSharedResources {
		return nil, false
	}
	r := &sharedResult{done: make(chan struct{}), names: names, list: list}
	if list == nil {
		// The connection may change its subscription in place later; the
		// entry needs its own copy. A shared list never changes.
		r.names = slices.Clone(names)
	}
	sg.entries[key] = r
	return r, true
}

func (sg *sharedGenerations) finish(r *sharedResult, gen *generation, err error) {
	r.gen, r.err = gen, err
	sg.mu.Lock()
	if gen != nil {
		sg.resources += len(gen.items)
	}
	sg.mu.Unlock()
	close(r.done)
}

// shareKey returns the key under which w's generation for req may be shared,
// false when the type's generator cannot be compared (a func, or a struct
// holding one) and so cannot be told apart from another proxy's.
func (c *connection) shareKey(w *watch, req *model.PushRequest, plan uint64, st *pushState) (shareKey, bool) {
	g := c.generators[w.typeURL]
	if !comparableGenerator(g) {
		return shareKey{}, false
	}
	key := shareKey{
		gen:      g,
		typeURL:  w.typeURL,
		identity: c.identity(st),
		wildcard: w.resource.Wildcard,
		names:    w.subscriptionHash(),
	}
	if !req.Full {
		key.plan = plan
	}
	return key, true
}

func comparableGenerator(g Generator) bool {
	return g != nil && reflect.ValueOf(g).Comparable()
}

// hashNames identifies a list of names, in order, within this process.
// Each name is hashed whole (maphash: xxhash's streaming writes of one
// short name at a time were most of the cost of an EDS ACK's 5,000), and
// the hashes are folded in order.
func hashNames(names []string) uint64 {
	h := uint64(len(names))
	for _, n := range names {
		h = (h ^ maphash.String(namesSeed, n)) * 0x9e3779b97f4a7c15
	}
	return h
}

// namesSeed seeds the process's hashes of resource names.
var namesSeed = maphash.MakeSeed()

// identity is everything about the proxy that generators may read beyond its
// subscription: kind, namespace, domain, cluster, locality, the services its
// workload serves (with named target ports resolved), whether it is the
// ingress gateway, and its labels when a workload-selector rule in its
// namespace could tell proxies apart, else those that failoverPriority
// reads. TestSharingKeyCoversEveryProxyInput keeps this list complete. Proxies
// with the same identity get the same resources. It is computed once per
// served state (named ports follow endpoints, which change without a new
// push context) and connection; only the connection's goroutine calls it.
func (c *connection) identity(st *pushState) string {
	if c.identityOf == st {
		return c.identityKey
	}
	p, push := c.proxy, st.push
	var b strings.Builder
	for _, s := range []string{string(p.Type), p.Namespace, p.DNSDomain, p.ClusterID, p.Generator, p.Locality.String()} {
		b.WriteString(s)
		b.WriteByte(0)
	}
	w := push.WorkloadForProxy(p)
	// Inbound listeners follow the mutual TLS that PeerAuthentications
	// resolve for the proxy's Pod (Envoy) or its own labels (gRPC), and a
	// gRPC server the tlsMode label too (PERMISSIVE is STRICT there).
	b.WriteString("mtls:")
	writeMTLSPolicy(&b, push.InboundMTLS(p.Namespace, p.Labels))
	if w != nil {
		b.WriteByte('/')
		writeMTLSPolicy(&b, push.InboundMTLS(w.Namespace, w.Labels))
	}
	b.WriteByte('/')
	b.WriteString(p.Labels[model.TLSModeLabel])
	b.WriteByte(0)
	if w != nil {
		for _, svc := range push.ServiceTargets(w) {
			b.WriteString("target:")
			b.WriteString(svc.Hostname)
			for _, port := range svc.Ports {
				if port.TargetPortName == "" {
					continue
				}
				// A named target port resolves through this workload's own
				// endpoints, which may differ between replicas.
				b.WriteByte(':')
				b.WriteString(port.TargetPortName)
				b.WriteByte('=')
				b.WriteString(formatUint(uint64(workloadPort(push, svc, port, w))))
			}
			b.WriteByte(0)
		}
	}
	if id := p.VerifiedIdentity; id != nil {
		// What a proxy proved decides which Secrets it may have: one that
		// proved nothing must never share another's.
		b.WriteString("verified:")
		b.WriteString(id.String())
		b.WriteByte(0)
	}
	if push.IsIngressGateway(p) {
		// Only the ingress gateway's routers get the Ingresses' listeners,
		// routes and certificates; another router in its namespace must
		// not share them.
		b.WriteString("ingress-gateway")
		b.WriteByte(0)
	}
	if push.HasWorkloadSelectorRules(p.Namespace) || push.RoutesDependOnSourceLabels(p.Namespace) {
		// Workload-selected rules, and VirtualService matches on the
		// caller's labels, make any label matter.
		b.WriteString("labels:")
		b.WriteString(labelsKey(p.Labels))
	} else if keys := push.FailoverPriorityLabels(); len(keys) > 0 {
		// failoverPriority orders endpoints by how many of these labels
		// they share with the proxy, and applies only to a proxy that has
		// labels or a locality at all.
		b.WriteString("failover:")
		if len(p.Labels) > 0 {
			b.WriteByte('+')
		}
		for _, k := range keys {
			if v, ok := p.Labels[k]; ok {
				b.WriteString(k)
				b.WriteByte('=')
				b.WriteString(v)
				b.WriteByte(0)
			}
		}
	}
	c.identityOf, c.identityKey = st, b.String()
	return c.identityKey
}

func writeMTLSPolicy(b *strings.Builder, m pushcontext.MTLSPolicy) {
	b.WriteString(m.Mode.String())
	for _, p := range m.Ports {
		b.WriteByte(',')
		b.WriteString(formatUint(uint64(p.Port)))
		b.WriteByte('=')
		b.WriteString(p.Mode.String())
	}
}

// workloadPort is the port number that w's endpoint of svc's port has, 0 if w
// has none.
func workloadPort(push *pushcontext.PushContext, svc *model.Service, port *model.Port, w *model.Workload) uint32 {
	for _, ep := range push.Endpoints(svc.Hostname, port.Port, nil) {
		if slices.Contains(w.IPs, ep.Address) {
			return ep.Port
		}
	}
	return 0
}
