package xds

import (
	"fmt"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// TestDebouncer drives the debouncer with literal times: quiet 100 ms, max
// 1 s, as the flags default to, scaled down.
func TestDebouncer(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	update := func(name string) *model.PushRequest {
		kind := model.KindService
		if len(name) > 4 && name[:4] == "eps-" {
			kind = model.KindEndpoints
		}
		return model.NewPushRequest(model.ConfigKey{Kind: kind, Namespace: "ns", Name: name}, t0)
	}
	type step struct {
		// add is an update at ms: a Service, or endpoints when it starts
		// with "eps-"; "" is the timer firing at ms.
		add       string
		ms        int
		armed     bool          // add: the caller must arm its timer
		immediate bool          // add: the update is pushed at once
		wait      time.Duration // timer: how much longer to wait, 0 if due
		keys      int           // timer: the keys of the pushed request
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"one update is pushed after the quiet period", []step{
			{add: "a", ms: 0, armed: true},
			{ms: 100, keys: 1},
		}},
		{"a burst inside the quiet period is one push", []step{
			{add: "a", ms: 0, armed: true},
			{add: "b", ms: 30},
			{add: "c", ms: 60},
			{ms: 100, wait: 60 * time.Millisecond}, // 40 ms quiet so far
			{ms: 160, keys: 3},
		}},
		{"continuous updates are pushed at max, though never quiet", []step{
			{add: "a", ms: 0, armed: true},
			{ms: 100, wait: 0 * time.Millisecond, keys: 1},
			{add: "b", ms: 200, armed: true},
			{add: "c", ms: 290},
			{ms: 300, wait: 90 * time.Millisecond},
			{add: "d", ms: 380},
			{ms: 390, wait: 90 * time.Millisecond},
			{add: "e", ms: 470},
			{add: "f", ms: 1150},
			{ms: 1190, wait: 10 * time.Millisecond}, // 60 ms quiet; max in 10
			{add: "g", ms: 1195},
			{ms: 1200, keys: 6}, // 5 ms quiet: only max makes it due
		}},
		{"after a push the next update starts a new burst", []step{
			{add: "a", ms: 0, armed: true},
			{ms: 100, keys: 1},
			{add: "b", ms: 150, armed: true},
			{ms: 250, keys: 1},
		}},
		{"endpoint changes are pushed at once, however close together", []step{
			{add: "eps-a", ms: 0, immediate: true},
			{add: "eps-b", ms: 20, immediate: true},
			{add: "eps-c", ms: 500, immediate: true},
		}},
		{"an endpoint change joins a pending burst", []step{
			{add: "a", ms: 0, armed: true},
			{add: "eps-a", ms: 50},
			{ms: 100, wait: 50 * time.Millisecond},
			{ms: 150, keys: 2},
			{add: "eps-b", ms: 160, immediate: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := debouncer{after: 100 * time.Millisecond, max: time.Second}
			for i, st := range tc.steps {
				if st.add != "" {
					immediate, armed := d.add(update(st.add), at(st.ms))
					if armed != st.armed || (immediate != nil) != st.immediate {
						t.Fatalf("step %d: add %s at %d ms: armed = %v, immediate = %v; want %v, %v",
							i, st.add, st.ms, armed, immediate != nil, st.armed, st.immediate)
					}
					continue
				}
				req, _, wait := d.due(at(st.ms))
				if wait != st.wait {
					t.Fatalf("step %d: timer at %d ms: wait %v, want %v", i, st.ms, wait, st.wait)
				}
				switch {
				case st.wait > 0 && req != nil:
					t.Fatalf("step %d: pushed at %d ms while still waiting", i, st.ms)
				case st.wait == 0 && (req == nil || len(req.ConfigsUpdated) != st.keys):
					t.Fatalf("step %d: at %d ms pushed %v, want %d keys", i, st.ms, req, st.keys)
				}
			}
		})
	}
}

// TestDebounceMergesQuickUpdatesIntoOnePush checks the push loop's wiring of
// the debouncer (TestDebouncer checks its timing). The updates take
// milliseconds; the quiet period is long enough that a loaded machine
// does not split them.
func TestDebounceMergesQuickUpdatesIntoOnePush(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB, debounceAfter: 2 * time.Second, debounceMax: time.Minute})
	c := h.sotw("client")
	c.ack(c.subscribe(ClusterType))
	c.expectQuiet("after subscribing")
	fullBefore := h.counter(h.server.metrics.debouncedPushes, "full")
	triggersBefore := h.counter(h.server.metrics.triggers, model.KindService.String())

	const services = 20
	for i := range services {
		addService(h.store, fmt.Sprintf("svc-%d", i), fmt.Sprintf("10.2.0.%d", i))
	}
	cds := c.expect(ClusterType)
	if got, want := len(cds.GetResources()), services+2; got != want {
		t.Fatalf("first CDS push after the burst has %d clusters, want all %d", got, want)
	}
	if got := h.counter(h.server.metrics.debouncedPushes, "full") - fullBefore; got != 1 {
		t.Fatalf("%v full pushes for one burst, want 1", got)
	}
	reqs := h.gens.requests(proxyID("client"), ClusterType)
	if got := len(reqs[len(reqs)-1].ConfigsUpdated); got != 2*services {
		t.Fatalf("merged push request names %d changes, want %d (a Service and its Endpoints each)", got, 2*services)
	}
	if got := h.counter(h.server.metrics.triggers, model.KindService.String()) - triggersBefore; got != services {
		t.Fatalf("push triggers for services = %v, want %d", got, services)
	}
}

// TestDebounceMaxForcesPushDuringContinuousUpdates checks that the push loop
// pushes while updates keep coming. That it is max, not a gap in the
// updates, that makes the push due is TestDebouncer's to show.
func TestDebounceMaxForcesPushDuringContinuousUpdates(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB, debounceAfter: 200 * time.Millisecond, debounceMax: 400 * time.Millisecond})
	c := h.sotw("client")
	c.ack(c.subscribe(ClusterType))
	c.expectQuiet("after subscribing")

	// Updates keep coming faster than the quiet period, so only DebounceMax
	// can start a push before they stop; they stop only once one arrived.
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		// Each update names a service the client sees: pushes are scoped,
		// and a change to a service nobody sees pushes nothing.
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				h.server.ConfigUpdate(model.NewPushRequest(model.ConfigKey{Kind: model.KindService, Namespace: "default", Name: "a"}, time.Now()))
			}
		}
	}()
	before := h.gens.count(proxyID("client"), ClusterType)
	h.eventually("a push during continuous updates", func() bool { return h.gens.count(proxyID("client"), ClusterType) > before })
	close(stop)
	<-stopped
}

func TestPushQueueCoalesces(t *testing.T) {
	q := newPushQueue()
	key := func(name string) model.ConfigKey {
		return model.ConfigKey{Kind: model.KindEndpoints, Namespace: "default", Name: name}
	}
	t0 := time.Unix(100, 0)
	q.put(model.NewPushRequest(key("a"), t0.Add(time.Second)))
	q.put(model.NewPushRequest(key("b"), t0))
	q.put(model.NewPushRequest(key("a"), t0.Add(2*time.Second)))

	if len(q.signal) != 1 {
		t.Fatalf("signal holds %d wake-ups, want 1", len(q.signal))
	}
	got := q.take()
	if got.Full || len(got.ConfigsUpdated) != 2 || !got.Start.Equal(t0) {
		t.Fatalf("merged request = %+v, want endpoint-only for a and b starting at the oldest change", got)
	}
	if q.take() != nil {
		t.Fatal("a second take returned a request")
	}
	q.put(model.NewPushRequest(model.ConfigKey{Kind: model.KindService, Name: "s"}, t0))
	q.put(model.NewPushRequest(key("c"), t0))
	if got := q.take(); !got.Full {
		t.Fatal("a full request merged with an endpoint-only one is not full")
	}
}
