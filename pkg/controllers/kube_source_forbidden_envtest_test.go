package controllers

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testlog"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// TestKubeSourceReportsMissingPermissions runs the source as a user that
// may do nothing: it must stay unsynced, and say which list was denied in
// its log, its metric and SyncProblem, rather than serve an empty mesh.
func TestKubeSourceReportsMissingPermissions(t *testing.T) {
	t.Parallel()
	env := kubetest.Start(t)
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:istio-system:nobody"}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	istio, err := istioclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var logs testlog.Buffer
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	src, err := NewKubeSource(KubeSourceOptions{
		Client: kube, IstioClient: istio, Store: model.NewStore(),
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: metrics,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = src.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(src.SyncProblem(), "EndpointSlice") {
		if time.Now().After(deadline) {
			t.Fatalf("no denied list reported; SyncProblem %q, log:\n%s", src.SyncProblem(), logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if src.HasSynced() {
		t.Error("a source that may not list anything claims to be synced")
	}
	if !strings.Contains(src.SyncProblem(), "forbidden") {
		t.Errorf("SyncProblem %q does not say forbidden", src.SyncProblem())
	}
	// The source records the problem before it logs it.
	eventually(t, "the missing permission named in the log", func() bool {
		return strings.Contains(logs.String(), "permission denied: cannot list or watch EndpointSlice")
	})
	if got := counterValue(t, metrics.WatchErrors.WithLabelValues("EndpointSlice", "forbidden")); got == 0 {
		t.Error("meshpilot_kube_watch_errors_total{kind=EndpointSlice,reason=forbidden} was not counted")
	}
	// The Istio kinds are refused and reported the same way.
	for _, k := range istioKinds {
		eventually(t, k.kind+" refusal reported", func() bool {
			return strings.Contains(src.SyncProblem(), k.kind+": ") &&
				strings.Contains(logs.String(), "permission denied: cannot list or watch "+k.kind) &&
				counterValue(t, metrics.WatchErrors.WithLabelValues(k.kind, "forbidden")) > 0
		})
	}
}
