package xds

import (
	"time"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// debouncer merges a burst of updates into one push: it is due once no
// update has come for after, or once the burst's first update has waited
// max. It keeps no clock of its own; the push loop passes the time in, so
// tests can drive it with any times they like.
type debouncer struct {
	after, max  time.Duration
	pending     *model.PushRequest
	first, last time.Time
}

// add folds req, arriving at now, into the pending request. It reports
// whether req starts a new burst, when the caller must arm its timer for
// after.
func (d *debouncer) add(req *model.PushRequest, now time.Time) (started bool) {
	started = d.pending == nil
	if started {
		d.first = now
	}
	d.pending = d.pending.Add(req)
	d.last = now
	return started
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
	*d = debouncer{after: d.after, max: d.max}
	return req, first, 0
}
