package xds

import (
	"context"
	"fmt"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
)

func TestSlowClientDoesNotBlockOthers(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB, sendTimeout: 2 * time.Second})

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
		cds := fast.expect(ClusterType)
		if got, want := len(cds.GetResources()), 3+i; got != want {
			t.Fatalf("push %d: fast client got %d clusters, want %d", i, got, want)
		}
		fast.ack(cds)
	}

	// The stuck send times out and the slow stream is closed.
	h.eventually("the slow stream's send to time out", func() bool {
		return h.counter(h.server.metrics.streamErrors, reasonSendTimeout) >= 1
	})
	h.eventually("the slow stream to be dropped", func() bool {
		for _, st := range h.server.SyncStatus() {
			if st.ProxyID == proxyID("slow") {
				return false
			}
		}
		return true
	})
}
