package xds

import "testing"

// Changes stored before Start make no requests, as the first build reads
// them from the store; changes after it are pushed as usual.
func TestConfigChangedBeforeStartIsInTheFirstBuild(t *testing.T) {
	h := newHarness(t, harnessConfig{manualStart: true})
	addService(h.store, "a", "10.0.0.1")
	if req := h.server.updates.take(); req != nil {
		t.Fatalf("a change before Start queued %+v; the first build holds it anyway", req)
	}

	h.start()
	h.eventually("the first push context", h.server.Ready)
	first := h.server.PushContext()
	if len(first.Services()) != 1 {
		t.Fatalf("the first push context holds %d services, want the one stored before Start", len(first.Services()))
	}

	addService(h.store, "b", "10.0.0.2")
	h.eventually("a push context with the change after Start", func() bool {
		return len(h.server.PushContext().Services()) == 2
	})
}
