package controllers

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/record"

	"github.com/meshpilot/meshpilot/internal/testlog"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// Without an API server (Ingresses from a directory) problems are still
// logged and counted; there is just no Ingress to send Events about.
func TestIngressProblemsWithoutAClient(t *testing.T) {
	metrics := NewIngressStatusMetrics(prometheus.NewRegistry())
	logs := &testlog.Buffer{}
	r, err := NewIngressProblemReporter(IngressProblemOptions{Metrics: metrics, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	web := model.NamespacedName{Namespace: "shop", Name: "web"}
	r.Report(map[model.NamespacedName][]string{web: {`service "cart" not found`, "duplicate path /x"}})
	if got := gaugeValue(t, metrics.IngressProblems.WithLabelValues("shop", "web")); got != 2 {
		t.Errorf("meshpilot_ingress_problems{shop,web} = %v, want 2", got)
	}
	if !strings.Contains(logs.String(), "ingress has problems") {
		t.Errorf("problems not logged:\n%s", logs.String())
	}
	r.Report(nil)
	if !strings.Contains(logs.String(), "ingress problems resolved") || seriesCount(metrics.IngressProblems) != 0 {
		t.Errorf("resolution not logged, or the series kept:\n%s", logs.String())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.Run(ctx) // returns at once: nothing to send Events to
	if ctx.Err() != nil {
		t.Error("Run without a Client waited for its context")
	}

	if _, err := NewIngressProblemReporter(IngressProblemOptions{Recorder: record.NewFakeRecorder(1)}); err == nil {
		t.Error("a Recorder without a Client was accepted")
	}
}
