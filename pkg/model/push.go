package model

import (
	"maps"
	"time"
)

// PushRequest says what changed since the last push. The debouncer merges
// the requests of many changes into one.
type PushRequest struct {
	// Full is false when only endpoints changed: then no push context rebuild
	// is needed and only EDS is pushed.
	Full bool
	// ConfigsUpdated lists the objects that changed. Empty on a Full push
	// means everything may have changed (a forced push).
	ConfigsUpdated map[ConfigKey]struct{}
	// Start is when the oldest merged change happened, for convergence time.
	Start time.Time
}

// NewPushRequest returns the request for one changed object.
func NewPushRequest(key ConfigKey, now time.Time) *PushRequest {
	return &PushRequest{
		Full:           !key.Kind.EndpointsOnly(),
		ConfigsUpdated: map[ConfigKey]struct{}{key: {}},
		Start:          now,
	}
}

// EndpointsOnly reports whether a change of this kind can only affect
// endpoints. Pods are not: besides the endpoints that point at them (which
// the sources re-emit), a Pod is the identity of the proxy running in it,
// and its inbound configuration follows the Pod's IPs and labels.
func (k Kind) EndpointsOnly() bool {
	return k == KindEndpoints
}

// Merge combines two requests into a new one, changing neither; either may
// be nil. Use it where a request is shared (a push plan many connections
// hold); a request owned by one holder grows with Add.
func (r *PushRequest) Merge(o *PushRequest) *PushRequest {
	if r == nil {
		return o
	}
	if o == nil {
		return r
	}
	merged := &PushRequest{
		Full:  r.Full || o.Full,
		Start: r.Start,
	}
	if o.Start.Before(merged.Start) {
		merged.Start = o.Start
	}
	// A forced full push (no keys) stays forced.
	if (r.Full && len(r.ConfigsUpdated) == 0) || (o.Full && len(o.ConfigsUpdated) == 0) {
		return merged
	}
	merged.ConfigsUpdated = make(map[ConfigKey]struct{}, len(r.ConfigsUpdated)+len(o.ConfigsUpdated))
	maps.Copy(merged.ConfigsUpdated, r.ConfigsUpdated)
	maps.Copy(merged.ConfigsUpdated, o.ConfigsUpdated)
	return merged
}

// Add folds o into r and returns r (o when r is nil). Unlike Merge it
// changes r, so r must be the caller's alone: the debouncer's pending
// request, which absorbs every event of a burst. Merging a copy per event,
// as Merge does, costs O(n²) over the n objects of an initial sync; Add
// costs O(n).
func (r *PushRequest) Add(o *PushRequest) *PushRequest {
	if r == nil {
		return o
	}
	if o == nil {
		return r
	}
	if o.Start.Before(r.Start) {
		r.Start = o.Start
	}
	forced := (r.Full && len(r.ConfigsUpdated) == 0) || (o.Full && len(o.ConfigsUpdated) == 0)
	r.Full = r.Full || o.Full
	if forced {
		// A forced full push (no keys) stays forced.
		r.ConfigsUpdated = nil
		return r
	}
	if r.ConfigsUpdated == nil {
		r.ConfigsUpdated = make(map[ConfigKey]struct{}, len(o.ConfigsUpdated))
	}
	maps.Copy(r.ConfigsUpdated, o.ConfigsUpdated)
	return r
}

// KindsUpdated returns the set of kinds this request touches.
func (r *PushRequest) KindsUpdated() map[Kind]bool {
	kinds := map[Kind]bool{}
	for k := range r.ConfigsUpdated {
		kinds[k.Kind] = true
	}
	return kinds
}
