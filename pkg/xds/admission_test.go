package xds

import (
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	dto "github.com/prometheus/client_model/go"
)

// queued waits until n streams wait for a slot.
func queued(t *testing.T, a *syncAdmission, n int) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		a.mu.Lock()
		got := len(a.waiters)
		a.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d streams wait for a slot, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSyncAdmissionAdmitsLongestConnectedFirst: with the one slot taken,
// waiting streams are admitted one at a time as slots come back, in the
// order they connected, not the order they asked.
func TestSyncAdmissionAdmitsLongestConnectedFirst(t *testing.T) {
	a := newSyncAdmission(1)
	t0 := time.Now()
	holder := a.acquire(t0, nil, nil)
	admitted := make(chan string)
	slots := make(chan *syncSlot, 3)
	for _, w := range []struct {
		name string
		age  time.Duration
	}{{"second", 2}, {"first", 1}, {"third", 3}} {
		go func() {
			s := a.acquire(t0.Add(w.age*time.Millisecond), nil, nil)
			slots <- s
			admitted <- w.name
		}()
	}
	queued(t, a, 3)
	holder.release()
	for _, want := range []string{"first", "second", "third"} {
		if got := <-admitted; got != want {
			t.Fatalf("admitted %s, want %s", got, want)
		}
		(<-slots).release()
	}
}

// TestSyncAdmissionReleasesOnce: a slot given back twice (by the stream
// and by its timer) frees one slot, not two.
func TestSyncAdmissionReleasesOnce(t *testing.T) {
	a := newSyncAdmission(1)
	s := a.acquire(time.Now(), nil, nil)
	s.release()
	s.release()
	if a.free != 1 {
		t.Fatalf("%d slots free after one slot was released twice, want 1", a.free)
	}
}

// TestSyncAdmissionGivesUpWithTheStream: a stream that ends while it waits
// leaves the queue, and the slot it waited for goes to the next stream.
func TestSyncAdmissionGivesUpWithTheStream(t *testing.T) {
	a := newSyncAdmission(1)
	holder := a.acquire(time.Now(), nil, nil)
	done := make(chan struct{})
	gaveUp := make(chan *syncSlot)
	go func() { gaveUp <- a.acquire(time.Now(), done, nil) }()
	queued(t, a, 1)
	close(done)
	if s := <-gaveUp; s != nil {
		t.Fatal("a stream that ended was admitted")
	}
	queued(t, a, 0)
	holder.release()
	next := make(chan *syncSlot)
	go func() { next <- a.acquire(time.Now(), nil, nil) }()
	select {
	case s := <-next:
		s.release()
	case <-time.After(waitLimit):
		t.Fatal("the slot was not free after its holder released it")
	}
}

// TestSyncAdmissionBoundsTheHold: a stream that never finishes its sync
// (a client that stops reading or acknowledging) holds its slot for at
// most maxHold.
func TestSyncAdmissionBoundsTheHold(t *testing.T) {
	a := newSyncAdmission(1)
	a.maxHold = 30 * time.Millisecond
	start := time.Now()
	a.acquire(start, nil, nil) // never released by its stream
	s := a.acquire(start, nil, nil)
	if s == nil || time.Since(start) < a.maxHold {
		t.Fatalf("admitted after %v, before the holder's %v ran out", time.Since(start), a.maxHold)
	}
	s.release()
}

// TestInitialSyncsTakeTurns runs the admission on a real stream: with one
// slot, a second proxy's first answer waits until the first proxy has
// acknowledged its clusters and listeners; a proxy whose sync is over is
// answered at once, whatever else waits.
func TestInitialSyncsTakeTurns(t *testing.T) {
	h := newHarness(t, harnessConfig{maxSyncs: 1})
	first, second := h.sotw("first"), h.sotw("second")
	cds := first.subscribe(ClusterType)
	second.send(&discoveryv3.DiscoveryRequest{TypeUrl: ClusterType})
	queued(t, h.server.syncs, 1)
	select {
	case r := <-second.responses:
		t.Fatalf("the second proxy was answered (%s) while the first held the only slot", shortType(r.GetTypeUrl()))
	case <-time.After(200 * time.Millisecond):
	}
	first.ack(cds)
	lds := first.subscribe(ListenerType)
	first.ack(lds)
	if r := second.recv(); r.GetTypeUrl() != ClusterType {
		t.Fatalf("the second proxy got %s, want its clusters once the first was done", r.GetTypeUrl())
	}
	// The second now holds the slot and has acknowledged nothing; the first,
	// done, still gets a new subscription answered (barrier subscribes to a
	// probe and waits for its answer).
	if got := first.barrier(); len(got) != 0 {
		t.Fatalf("the first proxy got %d unexpected responses", len(got))
	}
	// Both waits are on record, the second's at least as long as it was
	// seen waiting: the test's 200 ms began once the server had queued it.
	var m dto.Metric
	if err := h.server.metrics.syncWait.Write(&m); err != nil {
		t.Fatal(err)
	}
	if n, sum := m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum(); n != 2 || sum < 0.2 {
		t.Errorf("meshpilot_xds_sync_wait_seconds: %d waits, %.3f s in all; want 2, at least 0.2 s", n, sum)
	}
}

// TestUnwatchedTypeHoldsNoSlot: a type the client stopped watching in a
// request that crossed a response is owed no answer (Envoy takes the
// response in silence), so the stream's initial sync ends without it. The
// hold bound is lifted: only the unsubscription can give the slot back.
func TestUnwatchedTypeHoldsNoSlot(t *testing.T) {
	h := newHarness(t, harnessConfig{maxSyncs: 1, seed: seedAB})
	h.server.syncs.maxHold = time.Hour
	first, second := h.sotw("first"), h.sotw("second")
	eds := first.subscribe(EndpointType, hostname("a"))
	setEndpoints(h.store, "a", "10.1.0.9")
	first.expect(EndpointType)
	first.ack(eds) // crossed that push: stale, and watches nothing
	cds := first.subscribe(ClusterType)
	first.ack(cds)
	lds := first.subscribe(ListenerType)
	first.ack(lds)
	second.send(&discoveryv3.DiscoveryRequest{TypeUrl: ClusterType})
	if r := second.recv(); r.GetTypeUrl() != ClusterType {
		t.Fatalf("the second proxy got %s, want its clusters once the first was done", r.GetTypeUrl())
	}
}
