package xds

import (
	"testing"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func TestTranslationProblemsGaugeFollowsTheServedPushContext(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB, manualStart: true})
	gauge := func() float64 {
		t.Helper()
		families, err := h.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == "meshpilot_translation_problems" {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("meshpilot_translation_problems is not registered")
		return 0
	}
	if got := gauge(); got != 0 {
		t.Fatalf("before the first push context: %v, want 0", got)
	}
	h.start()
	h.eventually("the first push context", h.server.Ready)

	rule := model.ConfigKey{Kind: model.KindDestinationRule, Namespace: "default", Name: "r"}
	pc := h.server.PushContext()
	pc.ReportProblem(rule, "tls mode SIMPLE without credentialName")
	pc.ReportProblem(rule, "tls mode SIMPLE without credentialName") // the same problem again
	pc.ReportProblem(rule, "unknown load balancer")
	if got := gauge(); got != 2 {
		t.Fatalf("after two distinct problems: %v, want 2", got)
	}

	// A new push context starts without problems.
	h.server.ConfigUpdate(&model.PushRequest{Full: true})
	h.eventually("a new push context", func() bool { return h.server.PushContext() != pc })
	if got := gauge(); got != 0 {
		t.Fatalf("after a rebuild: %v, want 0", got)
	}
}
