package xds

import (
	"time"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// debouncer merges a burst of updates into one push: it is due once no
// update has come for after, or once the burst's first update has waited
// max. A lone endpoint change, one that follows a quiet period with
// nothing pending, is not held at all: it needs no push context rebuild,
// and waiting out the quiet period would be its whole latency. Updates
// that follow it within after are merged as usual.
//
// It keeps no clock of its own; the push loop passes the time in, so tests
// can drive it with any times they like.
type debouncer struct {
	after, max  time.Duration
	pending     *model.PushRequest
	first, last time.Time
	// lastUpdate is when the previous update arrived, held or not.
	lastUpdate time.Time
}

// add takes req, arriving at now. A lone endpoint change comes back as
// immediate, for the caller to push at once. Anything else is folded into
// the pending request, and arm says it starts a new burst, for which the
// caller arms its timer for after.
func (d *debouncer) add(req *model.PushRequest, now time.Time) (immediate *model.PushRequest, arm bool) {
	quietBefore := d.lastUpdate.IsZero() || now.Sub(d.lastUpdate) >= d.after
	d.lastUpdate = now
	if d.pending == nil && !req.Full && quietBefore {
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
