package xds

import (
	"time"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// debouncer merges a burst of config updates into one push: it is due once
// no update has come for after, or once the burst's first update has waited
// max. Endpoint changes are not held when no burst is pending: they need no
// push context rebuild, and any wait would be their whole latency. They
// batch by themselves under load instead, because the updates that arrive
// while the push loop is busy wait in its queue and are taken, merged, in
// one go. While a burst is pending (at startup, say, when every object
// arrives at once) they join it: its push carries them anyway.
//
// It keeps no clock of its own; the push loop passes the time in, so tests
// can drive it with any times they like.
type debouncer struct {
	after, max  time.Duration
	pending     *model.PushRequest
	first, last time.Time
}

// add takes req, arriving at now. An endpoint change with no burst pending
// comes back as immediate, for the caller to push at once. Anything else is
// folded into the pending request, and arm says it starts a new burst, for
// which the caller arms its timer for after.
func (d *debouncer) add(req *model.PushRequest, now time.Time) (immediate *model.PushRequest, arm bool) {
	if !req.Full && d.pending == nil {
		return req, false
	}
	arm = d.pending == nil
	if arm {
		d.first = now
	}
	d.pending = d.pending.Add(req)
	d.last = now
	return nil, arm
}

// due is the timer's question at now. If the burst is due it returns the
// merged request and when the burst began, and starts afresh; otherwise it
// returns how much longer to wait.
func (d *debouncer) due(now time.Time) (req *model.PushRequest, first time.Time, wait time.Duration) {
	quiet, waited := now.Sub(d.last), now.Sub(d.first)
	if d.pending != nil && quiet < d.after && waited < d.max {
		return nil, time.Time{}, min(d.after-quiet, d.max-waited)
	}
	req, first = d.pending, d.first
	d.pending, d.first, d.last = nil, time.Time{}, time.Time{}
	return req, first, 0
}
