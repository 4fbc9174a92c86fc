package xds

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
)

// The fast client's pushes must each arrive within fastWithin, and all of
// them well before the slow stream's send can time out: a push loop that
// waited for the slow client would deliver them only after sendTimeout.
// A push takes milliseconds; the bounds leave room for a loaded machine
// running the race detector.
const (
	fastWithin      = 2 * time.Second
	slowSendTimeout = 8 * time.Second
)

func TestSlowClientDoesNotBlockOthers(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB, sendTimeout: slowSendTimeout})

	// The slow client asks for megabyte-sized resources and never reads.
	// Fixed small windows (which also turn off window growth) make the
	// server's Send block on flow control almost at once.
	slowConn := h.dial(grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	defer slowConn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow, err := discoveryv3.NewAggregatedDiscoveryServiceClient(slowConn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := slow.Send(&discoveryv3.DiscoveryRequest{Node: nodeFor("slow"), TypeUrl: bulkType, ResourceNames: []string{"bulk"}}); err != nil {
		t.Fatal(err)
	}
	h.eventually("the slow client's first response to be generated", func() bool {
		return h.gens.count(proxyID("slow"), bulkType) > 0
	})

	fast := h.sotw("fast")
	fast.ack(fast.subscribe(ClusterType))
	for i := range 3 {
		addService(h.store, fmt.Sprintf("svc-%d", i), "10.3.0.1")
		cds := fast.expectWithin(ClusterType, fastWithin)
		if got, want := len(cds.GetResources()), 3+i; got != want {
			t.Fatalf("push %d: fast client got %d clusters, want %d", i, got, want)
		}
		fast.ack(cds)
	}
	// The pushes above happened while the slow client was stuck, not after
	// it had been dropped.
	if !connected(h, "slow") {
		t.Fatal("the slow stream was gone before the fast client's pushes ended: the test proved nothing")
	}

	// The stuck send times out and the slow stream is closed. The send
	// that sticks may be one a push above started, so the wait allows a
	// whole send timeout and the usual limit after it, for a loaded
	// machine (under the race detector, beside the suite, 10 s was once
	// too little).
	h.eventuallyWithin("the slow stream's send to time out", slowSendTimeout+waitLimit, func() bool {
		return h.counter(h.server.metrics.streamErrors, reasonSendTimeout) >= 1
	})
	h.eventually("the slow stream to be dropped", func() bool { return !connected(h, "slow") })
}

func connected(h *harness, name string) bool {
	for _, st := range h.server.SyncStatus() {
		if st.ProxyID == proxyID(name) {
			return true
		}
	}
	return false
}

// A client that stops reading costs the server one response in flight and
// one merged push plan, however many pushes happen meanwhile: responses are
// generated only when the previous one has been sent, so the heap does not
// grow with the pushes the client misses. (That the send times out and the
// stream is dropped is TestSlowClientDoesNotBlockOthers's to check.)
func TestSlowClientCostIsBounded(t *testing.T) {
	// Each push would make the slow client one more megabyte-sized response;
	// a server that queued them would hold pushes MiB. The bound leaves room
	// for the push contexts and the garbage collector's slack.
	const (
		pushes    = 60
		maxGrowth = 24 << 20
	)
	// The pushes take a second or two; a send timeout far beyond them keeps
	// the slow client connected through all of them on a loaded machine.
	h := newHarness(t, harnessConfig{seed: seedAB, sendTimeout: time.Minute})
	slowConn := h.dial(grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	defer slowConn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow, err := discoveryv3.NewAggregatedDiscoveryServiceClient(slowConn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := slow.Send(&discoveryv3.DiscoveryRequest{Node: nodeFor("slow"), TypeUrl: bulkType, ResourceNames: []string{"bulk"}}); err != nil {
		t.Fatal(err)
	}
	h.eventually("the slow client's first response to be generated", func() bool {
		return h.gens.count(proxyID("slow"), bulkType) > 0
	})
	fast := h.sotw("fast")
	fast.ack(fast.subscribe(ClusterType))
	before := heapInUse()

	for i := range pushes {
		addService(h.store, fmt.Sprintf("svc-%d", i), "10.3.0.1")
		for {
			cds := fast.expect(ClusterType)
			fast.ack(cds)
			if len(cds.GetResources()) == 3+i {
				break
			}
		}
	}
	if !connected(h, "slow") {
		t.Fatal("the slow stream was dropped before the pushes ended: the test proved nothing")
	}
	if got := h.gens.count(proxyID("slow"), bulkType); got > 2 {
		t.Errorf("the stuck client's response was generated %d times while it read nothing, want at most 2 "+
			"(the one in flight and the one waiting for it)", got)
	}
	growth := int64(heapInUse()) - int64(before)
	t.Logf("heap growth over %d pushes: %d KiB; slow generations %d", pushes, growth>>10, h.gens.count(proxyID("slow"), bulkType))
	if growth > maxGrowth {
		t.Errorf("heap grew by %d MiB over %d pushes to a client that reads nothing, want at most %d MiB",
			growth>>20, pushes, maxGrowth>>20)
	}
	// The stuck send ends with its stream, when the client goes.
	cancel()
	h.eventually("the slow stream to be gone", func() bool { return !connected(h, "slow") })
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
