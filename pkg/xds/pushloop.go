package xds

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// pushQueue is a coalescing mailbox: any number of puts between two takes
// merge into one request, and the 1-buffered signal wakes the consumer
// without ever blocking the producer.
type pushQueue struct {
	mu      sync.Mutex
	pending *model.PushRequest
	signal  chan struct{}
}

func newPushQueue() pushQueue {
	return pushQueue{signal: make(chan struct{}, 1)}
}

func (q *pushQueue) put(req *model.PushRequest) {
	q.mu.Lock()
	q.pending = q.pending.Merge(req)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// take returns the merged pending request, nil if none.
func (q *pushQueue) take() *model.PushRequest {
	q.mu.Lock()
	defer q.mu.Unlock()
	req := q.pending
	q.pending = nil
	return req
}

// pushLoop debounces updates and pushes them, one at a time. Updates that
// arrive while a push context builds wait in the queue for the next round.
func (s *Server) pushLoop(ctx context.Context) {
	var (
		pending     *model.PushRequest
		first, last time.Time
		timer       = time.NewTimer(time.Hour)
		timerC      <-chan time.Time
	)
	timer.Stop()
	defer timer.Stop()
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
			if pending == nil {
				first = now
			}
			pending = pending.Merge(req)
			last = now
			if timerC == nil {
				timer.Reset(s.opts.DebounceAfter)
				timerC = timer.C
			}
		case now := <-timerC:
			quiet, waited := now.Sub(last), now.Sub(first)
			if quiet < s.opts.DebounceAfter && waited < s.opts.DebounceMax {
				timer.Reset(min(s.opts.DebounceAfter-quiet, s.opts.DebounceMax-waited))
				continue
			}
			timerC = nil
			req := pending
			pending = nil
			s.push(req)
		}
	}
}

// push applies one debounced request: a full request rebuilds the push
// context and pushes every watched type; an endpoint-only request updates the
// endpoints in place and pushes EDS only.
func (s *Server) push(req *model.PushRequest) {
	if req.Full {
		s.metrics.debouncedPushes.WithLabelValues("full").Inc()
		s.build(req)
	} else {
		s.metrics.debouncedPushes.WithLabelValues("eds").Inc()
		if !s.updateEndpoints(req) {
			return
		}
	}
	conns := s.connections()
	s.log.Debug("push", "full", req.Full, "changes", len(req.ConfigsUpdated), "connections", len(conns),
		"version", s.current.Load().version)
	for _, c := range conns {
		c.queue.put(req)
	}
}

func (s *Server) build(req *model.PushRequest) {
	start := time.Now()
	var prev *pushcontext.PushContext
	if cur := s.current.Load(); cur != nil {
		prev = cur.push
	}
	pc := pushcontext.Build(s.opts.Store, s.opts.PushContext, prev, req)
	s.metrics.buildTime.Observe(time.Since(start).Seconds())
	s.current.Store(&pushState{push: pc, version: pc.Version()})
}

// updateEndpoints is the endpoint fast path; it reports whether any
// service's endpoints changed.
func (s *Server) updateEndpoints(req *model.PushRequest) bool {
	var services []model.NamespacedName
	for key := range req.ConfigsUpdated {
		// Workload changes matter only through the endpoints the sources
		// re-emit for them.
		if key.Kind == model.KindEndpoints {
			services = append(services, model.NamespacedName{Namespace: key.Namespace, Name: key.Name})
		}
	}
	if len(services) == 0 {
		return false
	}
	cur := s.current.Load()
	changed := cur.push.UpdateEndpoints(s.opts.Store, services)
	if len(changed) == 0 {
		return false
	}
	next := &pushState{push: cur.push, edsUpdates: cur.edsUpdates + 1}
	next.version = cur.push.Version() + "+eds." + formatUint(next.edsUpdates)
	s.current.Store(next)
	return true
}

func formatUint(n uint64) string { return strconv.FormatUint(n, 10) }
