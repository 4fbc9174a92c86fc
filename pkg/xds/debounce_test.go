package xds

import (
	"fmt"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func TestDebounceMergesQuickUpdatesIntoOnePush(t *testing.T) {
	// The updates below take microseconds; the quiet period is far longer.
	h := newHarness(t, harnessConfig{seed: seedAB, debounceAfter: 300 * time.Millisecond, debounceMax: time.Minute})
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
