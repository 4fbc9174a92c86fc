package controllers

import (
	"math/rand/v2"
	"net/http"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
)

// How soon the informers come back after the API server does.
//
// client-go's reflector (v0.37) backs off after a refused list or watch:
// 800ms, doubled each time, with up to as much again of jitter, capped at
// 30s (so up to 60s), reset only after two minutes without a failure. An
// API server down for ten seconds can thus leave an informer asleep for
// another twenty after it is back, and every push waits with it. The
// backoff is a ReflectorOptions field that informer factories and shared
// informers do not pass through (client-go's TODO #136943), so meshpilot
// cannot set it per informer. Instead, the reads of its clients (lists and
// watches are GETs) do not fail while the API server refuses connections:
// they are retried here, every reconnectMin at first, doubling up to
// reconnectMax, for as long as the request's context allows. The reflector
// never sees the refusal, so its backoff never grows, and an informer
// resumes at most reconnectMax (plus a quarter of jitter) after the API
// server listens again. Two seconds is ample for a local API server that
// restarts, and a replica polling at that rate costs an API server that is
// coming back less than one request per second per watched kind.
//
// Writes are not retried: they are not idempotent, and their callers
// (status, events, leader election) have their own retries and deadlines.
// A read whose context can be cancelled waits for the API server for as
// long as that context lives, which is what an informer wants: stopping it
// cancels the read. A read that nobody can cancel (Istio's generated
// informers still list and watch with context.TODO) is retried for
// reconnectUncancellable at most, so that it still fails, and its informer
// stops, soon after shutdown; past that its reflector backs off as
// client-go's does.
const (
	reconnectMin           = 200 * time.Millisecond
	reconnectMax           = 2 * time.Second
	reconnectUncancellable = 5 * time.Second
)

// RetryRefusedReads makes the clients built from cfg retry a GET whose
// connection the API server refuses, as described above.
func RetryRefusedReads(cfg *rest.Config) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &refusedReadRetrier{next: rt} })
}

type refusedReadRetrier struct{ next http.RoundTripper }

func (r *refusedReadRetrier) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		return r.next.RoundTrip(req)
	}
	var giveUp time.Time
	if req.Context().Done() == nil {
		giveUp = time.Now().Add(reconnectUncancellable)
	}
	delay := reconnectMin
	for {
		resp, err := r.next.RoundTrip(req)
		if err == nil || !utilnet.IsConnectionRefused(err) || (!giveUp.IsZero() && time.Now().After(giveUp)) {
			return resp, err
		}
		wait := delay + rand.N(delay/4+1)
		select {
		case <-req.Context().Done():
			return nil, err
		case <-time.After(wait):
		}
		delay = min(2*delay, reconnectMax)
	}
}

// WrappedRoundTripper lets client-go find the transport underneath (it
// looks for it to cancel requests and to read TLS settings).
func (r *refusedReadRetrier) WrappedRoundTripper() http.RoundTripper { return r.next }
