package xds

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// mailbox is a coalescing mailbox: any number of puts between two takes
// merge into one value, and the 1-buffered signal wakes the consumer
// without ever blocking the producer.
type mailbox[T comparable] struct {
	mu      sync.Mutex
	merge   func(older, newer T) T
	pending T
	signal  chan struct{}
}

func newMailbox[T comparable](merge func(older, newer T) T) mailbox[T] {
	return mailbox[T]{merge: merge, signal: make(chan struct{}, 1)}
}

// pushQueue collects config updates until the push loop takes them.
type pushQueue = mailbox[*model.PushRequest]

// The queue owns what is put into it, so requests fold into the pending
// one in place.
func newPushQueue() pushQueue {
	return newMailbox((*model.PushRequest).Add)
}

func (q *mailbox[T]) put(v T) {
	q.mu.Lock()
	var zero T
	if q.pending == zero {
		q.pending = v
	} else {
		q.pending = q.merge(q.pending, v)
	}
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// take returns the merged pending value, the zero value if none.
func (q *mailbox[T]) take() T {
	q.mu.Lock()
	defer q.mu.Unlock()
	v := q.pending
	var zero T
	q.pending = zero
	return v
}

// pushLoop debounces updates and pushes them, one at a time. Updates that
// arrive while a push context builds wait in the queue for the next round.
func (s *Server) pushLoop(ctx context.Context) {
	d := debouncer{after: s.opts.DebounceAfter, max: s.opts.DebounceMax}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var timerC <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stop:
			return
		case <-s.updates.signal:
			req := s.updates.take()
			if req == nil {
				continue
			}
			now := time.Now()
			immediate, arm := d.add(req, now)
			if immediate != nil {
				s.push(immediate)
				s.metrics.debounced(now)
				continue
			}
			if arm {
				timer.Reset(d.after)
				timerC = timer.C
			}
		case now := <-timerC:
			req, first, wait := d.due(now)
			if wait > 0 {
				timer.Reset(wait)
				continue
			}
			timerC = nil
			if req != nil {
				s.push(req)
				s.metrics.debounced(first)
			}
		}
	}
}

// push applies one debounced request: a full request rebuilds the push
// context, an endpoint-only request updates the endpoints in place. Then
// every connection gets the push plan, which tells it which of its watched
// types the request can affect.
func (s *Server) push(req *model.PushRequest) {
	prev := s.current.Load()
	var wdsChanged bool
	if req.Full {
		s.metrics.debouncedPushes.WithLabelValues("full").Inc()
		s.build(req)
	} else {
		s.metrics.debouncedPushes.WithLabelValues("eds").Inc()
		update := s.updateEndpoints(req)
		wdsChanged = update.WDSChanged
		switch {
		case len(update.Hosts) == 0:
			return
		case len(update.IdentitiesChanged) > 0 || len(update.MTLSChanged) > 0:
			// Clusters check servers against the identities behind each
			// service, and an original-destination cluster sends mutual
			// TLS only while every endpoint takes it, so either change is
			// a service change: rebuild and push as for one, from the
			// snapshot the endpoints went into.
			prev = s.current.Load()
			req = withServiceChanges(req, slices.Concat(update.IdentitiesChanged, update.MTLSChanged))
			s.build(req)
		}
	}
	cur := s.current.Load()
	var prevPush *pushcontext.PushContext
	if prev != nil {
		prevPush = prev.push
	}
	plan := newPushPlan(s.planIDs.Add(1), req, prevPush, cur.push)
	if wdsChanged && !req.Full {
		// The fast path changed the snapshot in place, so the plan cannot
		// compare it with the one before.
		plan.addressesChanged = true
	}
	conns := s.connections()
	s.log.Debug("push", "full", req.Full, "changes", len(req.ConfigsUpdated), "connections", len(conns),
		"version", cur.version)
	for _, c := range conns {
		c.queue.put(plan)
	}
}

// mergePlans merges two plans a slow connection has not taken yet.
func (s *Server) mergePlans(older, newer *pushPlan) *pushPlan {
	return mergePlans(s.planIDs.Add(1), older, newer)
}

func (s *Server) build(req *model.PushRequest) {
	start := time.Now()
	var prev *pushcontext.PushContext
	if cur := s.current.Load(); cur != nil {
		prev = cur.push
	}
	pc := pushcontext.Build(s.opts.Store, *s.pcOpts.Load(), prev, req)
	s.metrics.built(time.Since(start))
	s.current.Store(newPushState(pc, pc.Version(), 0))
	if s.opts.OnBuild != nil {
		s.opts.OnBuild(pc)
	}
}

// updateEndpoints is the endpoint fast path; it reports what changed.
func (s *Server) updateEndpoints(req *model.PushRequest) pushcontext.EndpointUpdate {
	var services []model.NamespacedName
	for key := range req.ConfigsUpdated {
		// Workload changes matter only through the endpoints the sources
		// re-emit for them.
		if key.Kind == model.KindEndpoints {
			services = append(services, model.NamespacedName{Namespace: key.Namespace, Name: key.Name})
		}
	}
	if len(services) == 0 {
		return pushcontext.EndpointUpdate{}
	}
	cur := s.current.Load()
	update := cur.push.UpdateEndpoints(s.opts.Store, services)
	if len(update.Hosts) == 0 {
		return update
	}
	n := cur.edsUpdates + 1
	s.current.Store(newPushState(cur.push, cur.push.Version()+"+eds."+formatUint(n), n))
	return update
}

// withServiceChanges turns an endpoint-only request into a full one that
// also names services as changed.
func withServiceChanges(req *model.PushRequest, services []model.NamespacedName) *model.PushRequest {
	full := &model.PushRequest{Full: true, Start: req.Start, ConfigsUpdated: maps.Clone(req.ConfigsUpdated)}
	for _, svc := range services {
		full.ConfigsUpdated[model.ConfigKey{Kind: model.KindService, Namespace: svc.Namespace, Name: svc.Name}] = struct{}{}
	}
	return full
}

func formatUint(n uint64) string { return strconv.FormatUint(n, 10) }
