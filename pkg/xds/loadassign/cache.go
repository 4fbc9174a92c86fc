package loadassign

import (
	"sync"
	"sync/atomic"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// Cache holds marshalled load assignments. An assignment is a function of
// its cluster name and the endpoint list the push context returns for its
// host, port and subset labels, and that list is an immutable shared slice.
// So an assignment is cached per cluster and reused, by every proxy and
// across push context versions, for as long as the push context hands out
// the very same slice. The zero value is ready to use, and safe for
// concurrent use; share one Cache between generators so that they share
// the encodings.
type Cache struct {
	// entries maps Cluster to *variants.
	entries   sync.Map
	sweepMu   sync.Mutex
	lastSwept atomic.Pointer[string]
}

// variants are the cached load assignments of one cluster. There is
// usually one; more when namespaces resolve different DestinationRules that
// give one subset name different labels, or briefly after endpoint updates.
// Immutable once stored.
type variants struct {
	items []variant
}

type variant struct {
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

// maxVariants bounds the per-cluster variants kept.
const maxVariants = 4

// Get returns the marshalled load assignment of cluster, whose endpoints
// are those of its host and port that carry subsetLabels, from the cache
// when push still hands out the endpoint list it was built from.
func (c *Cache) Get(push *pushcontext.PushContext, cluster Cluster, subsetLabels map[string]string) (model.Resource, error) {
	c.sweep(push)
	eps := push.Endpoints(cluster.Host, cluster.Port, subsetLabels)
	var items []variant
	if cached, ok := c.entries.Load(cluster); ok {
		items = cached.(*variants).items
		for i := range items {
			if sameList(items[i].endpoints, eps) {
				return items[i].resource, nil
			}
		}
	}
	res, err := buildLoadAssignment(cluster.Name(), eps)
	if err != nil {
		return res, err
	}
	fresh := make([]variant, 0, min(len(items)+1, maxVariants))
	fresh = append(fresh, variant{endpoints: eps, labels: subsetLabels, resource: res})
	for _, v := range items {
		if len(fresh) == maxVariants {
			break
		}
		fresh = append(fresh, v)
	}
	// Concurrent misses may race here; each stores a correct value.
	c.entries.Store(cluster, &variants{items: fresh})
	return res, nil
}

// sweep drops cached load assignments that the push context no longer
// produces (deleted services, changed endpoints), once per push context
// version, so the cache does not pin old endpoint lists.
func (c *Cache) sweep(push *pushcontext.PushContext) {
	if last := c.lastSwept.Load(); last != nil && *last == push.Version() {
		return
	}
	c.sweepSlow(push)
}

// sweepSlow is sweep's once-per-version part, kept apart so that the check
// above does not move a copy of the version to the heap on every call.
func (c *Cache) sweepSlow(push *pushcontext.PushContext) {
	version := push.Version()
	c.sweepMu.Lock()
	defer c.sweepMu.Unlock()
	if last := c.lastSwept.Load(); last != nil && *last == version {
		return
	}
	c.entries.Range(func(k, v any) bool {
		cluster := k.(Cluster)
		if push.ServiceForHostname(cluster.Host) == nil {
			c.entries.CompareAndDelete(k, v)
			return true
		}
		items := v.(*variants).items
		current := make([]variant, 0, len(items))
		for _, item := range items {
			if sameList(item.endpoints, push.Endpoints(cluster.Host, cluster.Port, item.labels)) {
				current = append(current, item)
			}
		}
		switch {
		case len(current) == 0:
			c.entries.CompareAndDelete(k, v)
		case len(current) < len(items):
			c.entries.CompareAndSwap(k, v, &variants{items: current})
		}
		return true
	})
	c.lastSwept.Store(&version)
}
