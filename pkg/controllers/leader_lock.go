package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// termLock is the Lease lock of one term. It bounds leadership on its own,
// without relying on client-go to notice that renewals stopped: client-go
// cancels the term's context only after its renew loop has given up and
// its release of the Lease has returned, which together may take longer
// than LeaseDuration, after which a standby may be writing too.
//
// The bound is RenewDeadline after the last write that kept this replica
// the holder, counted from when that write was sent, not from when the API
// server answered: the API server applied it at or after the send, and a
// standby waits LeaseDuration from when it saw it applied, so a slow answer
// cannot stretch leadership into another replica's term. Once the bound
// passes without a newer such write, expired is called, once, with the
// time that last write was sent; the term ends then (see
// LeaderElector.Run). LeaseDuration - RenewDeadline (5 s by default) is
// left for a write under way to finish and for the two machines' clocks to
// run at slightly different rates.
type termLock struct {
	resourcelock.Interface
	renewDeadline time.Duration
	expired       func(lastRenewal time.Time)

	mu       sync.Mutex
	holder   string      // the holder the last Get read
	deadline time.Time   // zero until this replica first holds the Lease
	timer    *time.Timer // fires at deadline
	over     bool        // expired was called, or the term ended
}

func newTermLock(lock resourcelock.Interface, renewDeadline time.Duration, expired func(lastRenewal time.Time)) *termLock {
	return &termLock{Interface: lock, renewDeadline: renewDeadline, expired: expired}
}

func (l *termLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	r, raw, err := l.Interface.Get(ctx)
	if err == nil {
		l.mu.Lock()
		l.holder = r.HolderIdentity
		l.mu.Unlock()
	}
	return r, raw, err
}

func (l *termLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	err := l.Interface.Create(ctx, r)
	if err == nil {
		l.written(r, sent)
	}
	return err
}

// Update refuses to release a Lease that the Get before it found held by
// another replica. client-go reads the Lease before releasing it, so the
// update carries a fresh resourceVersion and the API server would accept
// it, but it decides whether to release from what it saw at its last
// renewal: after a pause longer than LeaseDuration it still believes it
// holds the Lease and would hand back a standby's term.
func (l *termLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	if r.HolderIdentity != l.Identity() {
		l.mu.Lock()
		holder := l.holder
		l.mu.Unlock()
		if holder != l.Identity() {
			return fmt.Errorf("not releasing the Lease: %q holds it", holder)
		}
	}
	sent := time.Now()
	err := l.Interface.Update(ctx, r)
	if err == nil {
		l.written(r, sent)
	}
	return err
}

// written moves the deadline on after a write the API server accepted,
// when that write names this replica the holder (a release does not).
func (l *termLock) written(r resourcelock.LeaderElectionRecord, sent time.Time) {
	if r.HolderIdentity != l.Identity() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	deadline := sent.Add(l.renewDeadline)
	if l.over || !deadline.After(l.deadline) {
		return
	}
	l.deadline = deadline
	if l.timer == nil {
		l.timer = time.AfterFunc(time.Until(deadline), l.check)
	} else {
		l.timer.Reset(time.Until(deadline))
	}
}

// check runs when the timer fires; a renewal may have moved the deadline
// on since it was set.
func (l *termLock) check() {
	l.mu.Lock()
	if l.over {
		l.mu.Unlock()
		return
	}
	if wait := time.Until(l.deadline); wait > 0 {
		l.timer.Reset(wait)
		l.mu.Unlock()
		return
	}
	l.over = true
	lastRenewal := l.deadline.Add(-l.renewDeadline)
	l.mu.Unlock()
	l.expired(lastRenewal)
}

// stop disarms the timer when the term is over.
func (l *termLock) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.over = true
	if l.timer != nil {
		l.timer.Stop()
	}
}
