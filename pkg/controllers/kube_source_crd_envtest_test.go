package controllers

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	apinetworking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testlog"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// TestKubeSourceWatchesDestinationRulesOnceTheCRDIsInstalled starts the
// source on a cluster without the DestinationRule CRD: it must become ready
// without it, and pick DestinationRules up once the CRD is installed, with
// no restart.
func TestKubeSourceWatchesDestinationRulesOnceTheCRDIsInstalled(t *testing.T) {
	env := kubetest.StartWithoutCRDs(t)
	ctx, cancel := context.WithCancel(context.Background())
	meta, err := metadata.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	store := model.NewStore()
	metrics := NewMetrics(prometheus.NewRegistry())
	logs := &testlog.Buffer{}
	src, err := NewKubeSource(KubeSourceOptions{Client: env.Kube, IstioClient: env.Istio, MetadataClient: meta,
		Store: store, Metrics: metrics, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	eventually(t, "sync without the CRD", src.HasSynced)
	if got := counterValue(t, metrics.CRDMissing.WithLabelValues(destinationRuleCRD)); got != 1 {
		t.Errorf("missing CRD counted %v times, want 1", got)
	}
	if !strings.Contains(logs.String(), "watching for it") {
		t.Errorf("the missing CRD's warning does not say it is watched for:\n%s", logs)
	}

	env.InstallCRDs(t)
	ns := env.Namespace(t, "crd-later")
	if _, err := env.Istio.NetworkingV1().DestinationRules(ns).Create(ctx, &networkingv1.DestinationRule{
		ObjectMeta: metav1.ObjectMeta{Name: "late"},
		Spec:       apinetworking.DestinationRule{Host: "reviews"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the DestinationRule in the store", func() bool { return drNames(store)["late"] != nil })
	if !strings.Contains(logs.String(), "the DestinationRule CRD is installed now") ||
		!strings.Contains(logs.String(), "version=v1") {
		t.Errorf("the start of the DestinationRule watch is not logged with its version:\n%s", logs)
	}
}
