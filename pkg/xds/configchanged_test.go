package xds

import (
	"testing"

	"github.com/meshpilot/meshpilot/pkg/model"
)

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

// An Ingress's status alone (the status writer's own writes coming back)
// changes nothing any proxy is sent: it asks for no push. The Ingress
// change before it does.
func TestConfigChangedSkipsIngressStatus(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.eventually("the first push context", h.server.Ready)
	h.store.UpsertIngress(&model.Ingress{Namespace: "default", Name: "web", Revision: "1"})
	h.store.SetIngressStatus(model.NamespacedName{Namespace: "default", Name: "web"},
		[]model.LoadBalancerIngress{{IP: "203.0.113.7"}})
	for kind, want := range map[model.Kind]float64{model.KindIngress: 1, model.KindIngressStatus: 0} {
		if got := h.counter(h.server.metrics.triggers, kind.String()); got != want {
			t.Errorf("%s push triggers = %v, want %v", kind, got, want)
		}
	}
}
