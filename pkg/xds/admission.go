package xds

import (
	"container/heap"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// When many proxies connect at once (a rollout, a control-plane restart),
// serving all their initial configurations side by side makes every one of
// them wait for the slowest: each is sent a few megabytes, and on a busy
// machine they all finish together, late. syncAdmission lets a bounded
// number of streams receive their initial configuration at a time, the
// longest-connected first, so the first proxies are ready early and the
// last no later than before. The measured effect (50 sidecars at 5,000
// Services) is in docs/performance.md.
//
// A stream holds its slot from the first answer to a subscription until it
// has acknowledged every answer and has been sent listeners and clusters
// (Envoy's and gRPC's initial sync: clusters, endpoints, listeners, routes,
// in either order), or, for a client that never asks for both, once it has
// asked for nothing more for syncGrace. A slot is never held longer than
// syncMaxHold: a client that stops reading loses its priority, not its
// stream. A stream is admitted once: its later subscriptions follow config
// changes and are answered at once, and pushes are never held back.
type syncAdmission struct {
	grace, maxHold time.Duration

	mu      sync.Mutex
	free    int
	waiters syncWaiters
	seq     uint64
}

const (
	syncGrace   = 50 * time.Millisecond
	syncMaxHold = 2 * time.Second
)

func newSyncAdmission(slots int) *syncAdmission {
	return &syncAdmission{grace: syncGrace, maxHold: syncMaxHold, free: slots}
}

type syncWaiter struct {
	connectedAt time.Time
	seq         uint64
	admitted    chan struct{}
	index       int // in the heap; -1 once admitted or given up
}

// acquire waits for a slot for a stream connected at connectedAt. It
// returns nil if done or stop closes first.
func (a *syncAdmission) acquire(connectedAt time.Time, done, stop <-chan struct{}) *syncSlot {
	a.mu.Lock()
	if a.free > 0 && len(a.waiters) == 0 {
		a.free--
		a.mu.Unlock()
		return a.slot()
	}
	a.seq++
	w := &syncWaiter{connectedAt: connectedAt, seq: a.seq, admitted: make(chan struct{})}
	heap.Push(&a.waiters, w)
	a.mu.Unlock()
	select {
	case <-w.admitted:
		return a.slot()
	case <-done:
	case <-stop:
	}
	a.mu.Lock()
	if w.index >= 0 {
		heap.Remove(&a.waiters, w.index)
		a.mu.Unlock()
		return nil
	}
	a.mu.Unlock()
	// Admitted as the stream ended: the slot goes to the next.
	a.release()
	return nil
}

// release frees a slot, for the longest-connected waiter if there is one.
func (a *syncAdmission) release() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.waiters) > 0 {
		close(heap.Pop(&a.waiters).(*syncWaiter).admitted)
		return
	}
	a.free++
}

func (a *syncAdmission) slot() *syncSlot {
	s := &syncSlot{a: a}
	// Armed only once assigned: release reads the field.
	s.maxHold = time.AfterFunc(time.Duration(math.MaxInt64), s.release)
	s.maxHold.Reset(a.maxHold)
	return s
}

// syncSlot is one stream's admission. Its release may come from the
// stream's goroutine or a timer; only the first counts.
type syncSlot struct {
	a        *syncAdmission
	released atomic.Bool
	maxHold  *time.Timer
	grace    *time.Timer
}

func (s *syncSlot) release() {
	if s.released.CompareAndSwap(false, true) {
		s.maxHold.Stop()
		s.a.release()
	}
}

// syncWaiters is a heap of waiters, the longest-connected first.
type syncWaiters []*syncWaiter

func (h syncWaiters) Len() int { return len(h) }
func (h syncWaiters) Less(i, j int) bool {
	if !h[i].connectedAt.Equal(h[j].connectedAt) {
		return h[i].connectedAt.Before(h[j].connectedAt)
	}
	return h[i].seq < h[j].seq
}
func (h syncWaiters) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *syncWaiters) Push(x any) {
	w := x.(*syncWaiter)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *syncWaiters) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	w.index = -1
	return w
}

// admitSync is called before the connection answers a subscription: the
// stream's first waits for an admission slot; later ones keep a held slot
// from running out its grace. It returns false if the stream ended while
// waiting.
func (c *connection) admitSync() bool {
	s := c.syncSlot
	if s == nil {
		start := time.Now()
		c.syncSlot = c.s.syncs.acquire(c.connectedAt, c.ctx.Done(), c.s.stop)
		if c.syncSlot == nil {
			return false
		}
		c.s.metrics.syncWait.Observe(time.Since(start).Seconds())
		return true
	}
	// Once given back, the slot is not taken again: later subscriptions
	// follow config changes and are answered at once.
	if s.grace != nil && !s.released.Load() {
		s.grace.Stop()
		s.grace = nil
	}
	return true
}

// syncAnswered is called after the connection recorded an ACK or NACK, or
// an unsubscription: a stream that has nothing unacknowledged gives its
// slot back, at once if it has been sent listeners and clusters, else after
// syncGrace unless it asks for more first.
func (c *connection) syncAnswered() {
	s := c.syncSlot
	if s == nil || s.released.Load() {
		return
	}
	for _, w := range c.watches {
		// A type the client watches nothing of any more is owed no
		// answer: Envoy takes a response of it in silence.
		if w.subscribed() && w.awaitsAnswer() {
			return
		}
	}
	if c.hasAnswered(ListenerType) && c.hasAnswered(ClusterType) {
		s.release()
		return
	}
	if s.grace == nil {
		s.grace = time.AfterFunc(s.a.grace, s.release)
	}
}

func (c *connection) hasAnswered(typeURL string) bool {
	w := c.watches[typeURL]
	return w != nil && w.sentNonce != ""
}

// endSync gives the slot back when the stream ends.
func (c *connection) endSync() {
	if s := c.syncSlot; s != nil {
		s.release()
	}
}
