package xds

import (
	"context"
	"fmt"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
)

// The fast client's pushes must each arrive within fastWithin, and all of
// them well before the slow stream's send can time out: a push loop that
// waited for the slow client would deliver them only after sendTimeout.
const (
	fastWithin      = 1500 * time.Millisecond
	slowSendTimeout = 6 * time.Second
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

	// The stuck send times out and the slow stream is closed.
	h.eventually("the slow stream's send to time out", func() bool {
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
