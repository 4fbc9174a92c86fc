package grpcgen

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// EndpointGenerator serves EDS: one ClusterLoadAssignment per cluster. A
// load assignment is a function of its name and the endpoint list the push
// context returns for its host, port and subset labels, and that list is an
// immutable shared slice. So a marshalled assignment is cached per cluster
// and reused, by every proxy and across push context versions, for as long
// as the push context hands out the very same slice.
type EndpointGenerator struct {
	opts Options
	// cache maps clusterKey to *claVariants.
	cache     sync.Map
	sweepMu   sync.Mutex
	lastSwept atomic.Pointer[string]
}

// claVariants are the cached load assignments of one cluster. There is
// usually one; more when namespaces resolve different DestinationRules that
// give one subset name different labels, or briefly after endpoint updates.
// Immutable once stored.
type claVariants struct {
	items []claVariant
}

type claVariant struct {
	// endpoints is the slice the assignment was built from. Holding it keeps
	// its backing array alive, so an equal data pointer and length can only
	// mean the same, unchanged list.
	endpoints []*model.Endpoint
	labels    map[string]string
	resource  model.Resource
}

func sameList(a, b []*model.Endpoint) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// maxCLAVariants bounds the per-cluster variants kept.
const maxCLAVariants = 4

// NewEndpointGenerator returns the EDS generator.
func NewEndpointGenerator(opts Options) *EndpointGenerator {
	return &EndpointGenerator{opts: opts.withDefaults()}
}

// Generate implements Generator. On an endpoint-only push (req not Full) it
// returns only the load assignments of the services whose endpoints changed;
// the caller treats that as a partial update.
func (g *EndpointGenerator) Generate(proxy *model.Proxy, push *pushcontext.PushContext, w *model.WatchedResource, req *model.PushRequest) (model.Resources, error) {
	if push == nil {
		return nil, fmt.Errorf("grpcgen: no push context")
	}
	g.sweep(push)
	ns := proxy.Namespace
	if req != nil && !req.Full {
		// Walk only the changed services' clusters and keep the watched ones,
		// so an endpoint push costs what changed, not what the proxy watches.
		var out model.Resources
		for _, svc := range changedServices(push, ns, req) {
			var err error
			if out, err = g.emitClusters(out, push, ns, svc, w); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	if w.Wildcard {
		var out model.Resources
		for _, svc := range push.ServicesVisibleTo(ns) {
			var err error
			if out, err = g.emitClusters(out, push, ns, svc, w); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	out := make(model.Resources, 0, len(w.ResourceNames))
	for _, name := range w.ResourceNames {
		key, ok := parseClusterName(name)
		if !ok {
			continue
		}
		svc := visibleService(push, ns, key.host)
		if svc == nil || svc.PortByNumber(key.port) == nil {
			continue
		}
		var labels map[string]string
		if key.subset != "" {
			dr := push.DestinationRuleFor(ns, key.host)
			if dr == nil {
				continue
			}
			subset := dr.Subset(key.subset)
			if subset == nil {
				continue
			}
			labels = subset.GetLabels()
		}
		var err error
		if out, err = g.emit(out, push, key, labels); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// emitClusters appends the load assignments of every cluster of svc (each
// port, plain and per subset of the rule the proxy's namespace resolves)
// that w watches.
func (g *EndpointGenerator) emitClusters(out model.Resources, push *pushcontext.PushContext, ns string, svc *model.Service, w *model.WatchedResource) (model.Resources, error) {
	dr := push.DestinationRuleFor(ns, svc.Hostname)
	var err error
	for _, p := range svc.Ports {
		key := clusterKey{host: svc.Hostname, port: p.Port}
		if watches(w, key) {
			if out, err = g.emit(out, push, key, nil); err != nil {
				return nil, err
			}
		}
		if dr == nil {
			continue
		}
		for _, s := range dr.Spec.GetSubsets() {
			key.subset = s.GetName()
			if !watches(w, key) {
				continue
			}
			if out, err = g.emit(out, push, key, s.GetLabels()); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func watches(w *model.WatchedResource, key clusterKey) bool {
	if w.Wildcard {
		return true
	}
	_, found := slices.BinarySearch(w.ResourceNames, key.name())
	return found
}

// changedServices returns the services visible from ns whose endpoints the
// request reports as changed.
func changedServices(push *pushcontext.PushContext, ns string, req *model.PushRequest) []*model.Service {
	var out []*model.Service
	for key := range req.ConfigsUpdated {
		if key.Kind != model.KindEndpoints {
			continue
		}
		if svc := push.ServiceByName(key.Namespace, key.Name); svc != nil && visibleService(push, ns, svc.Hostname) != nil {
			out = append(out, svc)
		}
	}
	return out
}

// LoadAssignment returns the marshalled load assignment of cluster
// outbound|port|subset|host whose endpoints carry subsetLabels, from the same
// cache Generate uses; other generators (Envoy's EDS) share it this way.
func (g *EndpointGenerator) LoadAssignment(push *pushcontext.PushContext, host string, port uint32, subset string, subsetLabels map[string]string) (model.Resource, error) {
	g.sweep(push)
	return g.loadAssignment(push, clusterKey{host: host, port: port, subset: subset}, subsetLabels)
}

// emit appends the cluster's load assignment, from the cache when the
// endpoint list is unchanged.
func (g *EndpointGenerator) emit(out model.Resources, push *pushcontext.PushContext, key clusterKey, labels map[string]string) (model.Resources, error) {
	res, err := g.loadAssignment(push, key, labels)
	if err != nil {
		return out, err
	}
	return append(out, res), nil
}

func (g *EndpointGenerator) loadAssignment(push *pushcontext.PushContext, key clusterKey, labels map[string]string) (model.Resource, error) {
	eps := push.Endpoints(key.host, key.port, labels)
	var variants []claVariant
	if cached, ok := g.cache.Load(key); ok {
		variants = cached.(*claVariants).items
		for i := range variants {
			if sameList(variants[i].endpoints, eps) {
				return variants[i].resource, nil
			}
		}
	}
	res, err := buildLoadAssignment(key.name(), eps)
	if err != nil {
		return res, err
	}
	fresh := make([]claVariant, 0, min(len(variants)+1, maxCLAVariants))
	fresh = append(fresh, claVariant{endpoints: eps, labels: labels, resource: res})
	for _, v := range variants {
		if len(fresh) == maxCLAVariants {
			break
		}
		fresh = append(fresh, v)
	}
	// Concurrent misses may race here; each stores a correct value.
	g.cache.Store(key, &claVariants{items: fresh})
	return res, nil
}

// sweep drops cached load assignments that the push context no longer
// produces (deleted services, changed endpoints), once per push context
// version, so the cache does not pin old endpoint lists.
func (g *EndpointGenerator) sweep(push *pushcontext.PushContext) {
	if last := g.lastSwept.Load(); last != nil && *last == push.Version() {
		return
	}
	g.sweepSlow(push)
}

// sweepSlow is sweep's once-per-version part, kept apart so that the check
// above does not move a copy of the version to the heap on every call.
func (g *EndpointGenerator) sweepSlow(push *pushcontext.PushContext) {
	version := push.Version()
	g.sweepMu.Lock()
	defer g.sweepMu.Unlock()
	if last := g.lastSwept.Load(); last != nil && *last == version {
		return
	}
	g.cache.Range(func(k, v any) bool {
		key := k.(clusterKey)
		if push.ServiceForHostname(key.host) == nil {
			g.cache.CompareAndDelete(k, v)
			return true
		}
		items := v.(*claVariants).items
		current := make([]claVariant, 0, len(items))
		for _, variant := range items {
			if sameList(variant.endpoints, push.Endpoints(key.host, key.port, variant.labels)) {
				current = append(current, variant)
			}
		}
		switch {
		case len(current) == 0:
			g.cache.CompareAndDelete(k, v)
		case len(current) < len(items):
			g.cache.CompareAndSwap(k, v, &claVariants{items: current})
		}
		return true
	})
	g.lastSwept.Store(&version)
}
