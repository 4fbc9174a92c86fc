package envoygen

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// ClusterGenerator serves CDS to sidecars and routers: an EDS cluster per
// visible service port and per DestinationRule subset, and, for sidecars,
// the inbound clusters of the proxy's own service ports plus the
// passthrough and black hole clusters.
//
// A cluster is a function of immutable inputs only (the service port, the
// DestinationRule the proxy resolves for the host, and the proxy kind), so
// marshalled clusters are cached by exactly those and shared by every proxy
// that resolves the same rule, whatever its namespace. Entries live for two
// push context versions: a cluster whose inputs a push did not touch is
// carried into the next version instead of being rebuilt.
type ClusterGenerator struct {
	opts      Options
	cache     clusterCache
	templates clusterTemplates
	// fixed clusters do not depend on anything.
	passthrough, inboundPassthrough, blackHole model.Resource
}

// NewClusterGenerator returns the CDS generator.
func NewClusterGenerator(opts Options) Generator {
	return newClusterGenerator(opts)
}

func newClusterGenerator(opts Options) *ClusterGenerator {
	g := &ClusterGenerator{opts: opts.withDefaults()}
	g.passthrough = clusterResource(buildPassthroughCluster(PassthroughCluster))
	g.inboundPassthrough = clusterResource(buildInboundPassthroughCluster())
	g.blackHole = clusterResource(buildBlackHoleCluster())
	return g
}

// Generate implements Generator. Envoy subscribes to CDS with a wildcard;
// an explicit subscription gets the named clusters that exist for it.
func (g *ClusterGenerator) Generate(proxy *model.Proxy, push *pushcontext.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	if push == nil {
		return nil, fmt.Errorf("envoygen: no push context")
	}
	visible := push.ServicesVisibleTo(proxy.Namespace)
	run := cdsRun{
		g:     g,
		push:  push,
		proxy: proxy,
		gen:   g.cache.generation(push.Version(), len(visible)),
		w:     w,
	}
	if w.Wildcard {
		run.out = make(model.Resources, 0, 2*len(visible)+4)
	}
	for _, svc := range visible {
		// A sidecar routes an alias's names, and the ingress gateway an
		// alias backend, to the target's clusters: no DNS cluster of its
		// own is needed.
		if push.AliasTarget(proxy.Namespace, svc) != nil {
			continue
		}
		run.outbound(svc)
	}
	if proxy.Type == model.Router {
		run.fixed(g.blackHole)
		return run.out, nil
	}
	run.inbound()
	run.fixed(g.passthrough)
	run.fixed(g.inboundPassthrough)
	run.fixed(g.blackHole)
	return run.out, nil
}

// cdsRun is one Generate call.
type cdsRun struct {
	g     *ClusterGenerator
	push  *pushcontext.PushContext
	proxy *model.Proxy
	gen   *clusterGeneration
	w     *model.WatchedResource
	out   model.Resources
}

func (r *cdsRun) wants(name string) bool {
	if r.w.Wildcard {
		return true
	}
	i := sort.SearchStrings(r.w.ResourceNames, name)
	return i < len(r.w.ResourceNames) && r.w.ResourceNames[i] == name
}

func (r *cdsRun) fixed(res model.Resource) {
	if r.wants(res.Name) {
		r.out = append(r.out, res)
	}
}

func (r *cdsRun) outbound(svc *model.Service) {
	rule := r.push.DestinationRuleForProxy(r.proxy, svc.Hostname)
	peer := peerTLSFor(r.push, svc)
	// Only a rule that says PASSTHROUGH somewhere makes original-destination
	// clusters, whose mutual TLS depends on the endpoints too.
	passthrough := peer.auto && rule != nil && pushcontext.MentionsPassthrough(rule.Spec)
	for _, p := range svc.Ports {
		mtls := lazyAllMTLS{push: r.push, host: svc.Hostname, port: p.Port}
		o := outboundCluster{svc: svc, port: p, rule: rule, proxyType: r.proxy.Type, peer: peer}
		if passthrough {
			o.peer.allMTLS = originalDst(rule, p.Port, "") && mtls.get()
		}
		r.emit(o)
		if rule == nil {
			continue
		}
		for _, s := range rule.Spec.GetSubsets() {
			o := outboundCluster{svc: svc, port: p, subset: s.GetName(), rule: rule, proxyType: r.proxy.Type, peer: peer}
			if passthrough {
				o.peer.allMTLS = originalDst(rule, p.Port, s.GetName()) && mtls.get()
			}
			r.emit(o)
		}
	}
}

// originalDst reports whether the rule makes the cluster of port and subset
// an original-destination one (applyLoadBalancer). The policy that applies
// to the cluster decides, port-level settings and subset included. (Istio
// infers the mode from the top-level policy, or the subset's own, instead,
// so a PASSTHROUGH set only for a port, or inherited by a subset, gets
// mutual TLS there even towards endpoints without sidecars.)
func originalDst(rule *pushcontext.DestinationRule, port uint32, subset string) bool {
	return rule.TrafficPolicy(port, subset).GetLoadBalancer().GetSimple() == networking.LoadBalancerSettings_PASSTHROUGH
}

// lazyAllMTLS asks AllEndpointsMTLS once per service port, when a cluster of
// the port needs it.
type lazyAllMTLS struct {
	push       *pushcontext.PushContext
	host       string
	port       uint32
	done, mtls bool
}

func (l *lazyAllMTLS) get() bool {
	if !l.done {
		l.mtls, l.done = l.push.AllEndpointsMTLS(l.host, l.port), true
	}
	return l.mtls
}

func (r *cdsRun) emit(o outboundCluster) {
	if !r.w.Wildcard && !r.wants(OutboundClusterName(o.svc.Hostname, o.port.Port, o.subset)) {
		return
	}
	r.out = append(r.out, r.gen.getOutbound(r.push, o, r.reporter(), &r.g.templates))
}

func (r *cdsRun) reporter() problemReporter {
	return problemReporter{push: r.push, logger: r.g.opts.Logger}
}

// inbound emits one cluster per port the proxy's workload listens on for
// its services; when services share a target port, the first by hostname
// wins, as in Istio.
func (r *cdsRun) inbound() {
	w := r.push.WorkloadForProxy(r.proxy)
	if w == nil {
		return
	}
	var seen []uint32
	for _, svc := range r.push.ServiceTargets(w) {
		rule := r.push.DestinationRuleForProxy(r.proxy, svc.Hostname)
		for _, p := range svc.Ports {
			target := targetPort(r.push, svc, p, w)
			if target == 0 || containsPort(seen, target) {
				continue
			}
			seen = append(seen, target)
			in := inboundCluster{targetPort: target, port: p, rule: rule}
			if !r.wants(InboundClusterName(target)) {
				continue
			}
			r.out = append(r.out, r.gen.getInbound(r.push, in, r.reporter()))
		}
	}
}

func containsPort(ports []uint32, p uint32) bool {
	for _, q := range ports {
		if q == p {
			return true
		}
	}
	return false
}

// targetPort is the port w listens on for service port p: the numeric
// target port, or for a named one the port of the endpoint of w that
// serves p. 0 when unknown.
func targetPort(push *pushcontext.PushContext, svc *model.Service, p *model.Port, w *model.Workload) uint32 {
	if p.TargetPort != 0 {
		return p.TargetPort
	}
	for _, ep := range push.Endpoints(svc.Hostname, p.Port, nil) {
		for _, ip := range w.IPs {
			if ep.Address == ip {
				return ep.Port
			}
		}
	}
	return 0
}

// clusterResource marshals a cluster deterministically.
func clusterResource(c *cluster.Cluster) model.Resource {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		panic("envoygen: marshal cluster " + c.GetName() + ": " + err.Error())
	}
	return model.Resource{Name: c.GetName(), Resource: &anypb.Any{TypeUrl: ClusterType, Value: b}}
}

// clusterCache holds marshalled clusters for the two most recent push
// context versions.
type clusterCache struct {
	mu   sync.Mutex
	gens [2]*clusterGeneration
}

type clusterGeneration struct {
	version string
	// Typed maps under a read-mostly lock: a sync.Map would box every key
	// (two structs of several words) on each lookup.
	mu       sync.RWMutex
	outbound map[outboundCluster]*clusterEntry
	inbound  map[inboundCluster]*clusterEntry
	// prev is the generation this one succeeded, consulted on a miss; it is
	// dropped when a newer generation arrives, so at most two are alive.
	prev atomic.Pointer[clusterGeneration]
}

// clusterEntry is a built cluster and the rule fields it had to drop, which
// are reported again to each later push context that reuses it.
type clusterEntry struct {
	res      model.Resource
	problems []droppedField
}

type droppedField struct{ field, reason string }

// generation returns the cache of push context version. A new one starts
// with room for sizeHint outbound clusters (one per service port; the first
// proxy's visible services are a fair guess): grown one cluster at a time,
// the map rehashes a dozen times while the first proxy of a large mesh waits.
func (c *clusterCache) generation(version string, sizeHint int) *clusterGeneration {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range c.gens {
		if g != nil && g.version == version {
			return g
		}
	}
	g := &clusterGeneration{
		version:  version,
		outbound: make(map[outboundCluster]*clusterEntry, sizeHint),
		inbound:  map[inboundCluster]*clusterEntry{},
	}
	g.prev.Store(c.gens[0])
	if c.gens[0] != nil {
		c.gens[0].prev.Store(nil)
	}
	c.gens[1] = c.gens[0]
	c.gens[0] = g
	return g
}

func (g *clusterGeneration) lookup(key any) *clusterEntry {
	g.mu.RLock()
	defer g.mu.RUnlock()
	switch k := key.(type) {
	case outboundCluster:
		return g.outbound[k]
	case inboundCluster:
		return g.inbound[k]
	}
	return nil
}

func (g *clusterGeneration) store(key any, e *clusterEntry) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch k := key.(type) {
	case outboundCluster:
		g.outbound[k] = e
	case inboundCluster:
		g.inbound[k] = e
	}
}

// getOutbound and getInbound return the cached cluster for key, or build,
// marshal and cache it.
func (g *clusterGeneration) getOutbound(push *pushcontext.PushContext, key outboundCluster, drop problemReporter, templates *clusterTemplates) model.Resource {
	g.mu.RLock()
	e := g.outbound[key]
	g.mu.RUnlock()
	if e != nil {
		return e.res
	}
	if plainCluster(key) {
		return g.miss(push, key, nil, func(problemReporter) model.Resource {
			return templates.get(key.port.Protocol, key.proxyType).resource(key)
		}, drop)
	}
	return g.miss(push, key, key.rule, func(drop problemReporter) model.Resource {
		return clusterResource(buildOutboundCluster(key, drop))
	}, drop)
}

func (g *clusterGeneration) getInbound(push *pushcontext.PushContext, key inboundCluster, drop problemReporter) model.Resource {
	g.mu.RLock()
	e := g.inbound[key]
	g.mu.RUnlock()
	if e != nil {
		return e.res
	}
	return g.miss(push, key, key.rule, func(drop problemReporter) model.Resource {
		return clusterResource(buildInboundCluster(key, drop))
	}, drop)
}

// miss takes the cluster from the previous generation when it has it
// (reporting its dropped fields to this push context), or builds it.
func (g *clusterGeneration) miss(push *pushcontext.PushContext, key any, rule *pushcontext.DestinationRule, build func(problemReporter) model.Resource, drop problemReporter) model.Resource {
	drop.rule = rule
	if prev := g.prev.Load(); prev != nil {
		if e := prev.lookup(key); e != nil {
			for _, p := range e.problems {
				drop.field(p.field, p.reason)
			}
			g.store(key, e)
			return e.res
		}
	}
	var recorded []droppedField
	drop.record = &recorded
	e := &clusterEntry{res: build(drop), problems: recorded}
	g.store(key, e)
	return e.res
}
