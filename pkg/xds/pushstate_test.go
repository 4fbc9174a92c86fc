package xds

import (
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// TestPushServesOneState: every type of one push comes from one push
// state, even when a newer state is stored while the push is under way.
// Were CDS generated from the old state and LDS from the new one, the
// client would get listeners for a service whose cluster it has not been
// sent. The newer state's own push sends that cluster, and then the
// listeners.
func TestPushServesOneState(t *testing.T) {
	var h *harness
	var armed atomic.Bool
	set := maps.Clone(newFakeGenerators().set)
	set[ClusterType] = GeneratorFunc(func(p *model.Proxy, pc *pushcontext.PushContext, w *model.WatchedResource, req *model.PushRequest) (model.Resources, error) {
		if armed.CompareAndSwap(true, false) {
			// A new Service arrives while this push generates its CDS;
			// wait until the server serves the state that has it.
			before := h.server.current.Load()
			addService(h.store, "c", "10.1.0.3")
			deadline := time.Now().Add(waitLimit)
			for h.server.current.Load() == before && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
		}
		return genClusters(p, pc, w, req), nil
	})
	h = newHarness(t, harnessConfig{seed: seedAB, generators: set})
	c := h.sotw("client")
	cds := c.subscribe(ClusterType)
	c.ack(cds)
	c.ack(c.subscribe(ListenerType))
	c.expectQuiet("after the ACKs")

	armed.Store(true)
	h.server.ConfigUpdate(&model.PushRequest{Full: true})
	all := []string{hostname("a"), hostname("b"), hostname("c")}
	clusters := names(cds.GetResources(), resourceName)
	for listenersDone := false; !listenersDone; {
		r := c.recvWithin(waitLimit)
		got := names(r.GetResources(), resourceName)
		switch r.GetTypeUrl() {
		case ClusterType:
			clusters = got
		case ListenerType:
			for _, l := range got {
				if !slices.Contains(clusters, l) {
					t.Fatalf("LDS names %s before any CDS response carried its cluster (clusters %v)", l, clusters)
				}
			}
			listenersDone = slices.Equal(got, all)
		}
		c.ack(r)
	}
}
