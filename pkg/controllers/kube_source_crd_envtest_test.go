package controllers

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apinetworking "istio.io/api/networking/v1"
	apisecurity "istio.io/api/security/v1beta1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testlog"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// TestKubeSourceWatchesIstioKindsOnceTheirCRDsAreInstalled starts the
// source on a cluster without the Istio CRDs: it must become ready without
// them, and pick each kind up once its own CRD is installed, with no
// restart. The CRDs arrive one at a time, so a kind whose CRD is still
// missing cannot hold up the other.
func TestKubeSourceWatchesIstioKindsOnceTheirCRDsAreInstalled(t *testing.T) {
	t.Parallel()
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
	runSynced(ctx, cancel, t, src, "sync without the CRDs")
	for _, k := range istioKinds {
		if got := counterValue(t, metrics.CRDMissing.WithLabelValues(k.crd())); got != 1 {
			t.Errorf("missing %s CRD counted %v times, want 1", k.kind, got)
		}
		if !strings.Contains(logs.String(), "the "+k.kind+" CRD ("+k.crd()+") is not installed") ||
			!strings.Contains(logs.String(), "watching for it") {
			t.Errorf("no warning that the %s CRD is missing and watched for:\n%s", k.kind, logs)
		}
	}
	ns := env.Namespace(t, "crd-later")

	installCRD := func(t *testing.T, k istioKind) {
		t.Helper()
		root, err := kubetest.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{
			Paths: []string{filepath.Join(root, "manifests", "crds", k.crd()+".gen.yaml")}, ErrorIfPathMissing: true,
			MaxTime: time.Minute, // envtest's 10s is tight on a busy two-core machine
		}); err != nil {
			t.Fatalf("install the %s CRD: %v", k.kind, err)
		}
	}
	for _, tc := range []struct {
		kind   istioKind
		create func() error
		seen   func() bool
	}{
		{
			kind: peerAuthentications,
			create: func() error {
				_, err := env.Istio.SecurityV1().PeerAuthentications(ns).Create(ctx, &securityv1.PeerAuthentication{
					ObjectMeta: metav1.ObjectMeta{Name: "late"},
					Spec: apisecurity.PeerAuthentication{Mtls: &apisecurity.PeerAuthentication_MutualTLS{
						Mode: apisecurity.PeerAuthentication_MutualTLS_STRICT}},
				}, metav1.CreateOptions{})
				return err
			},
			seen: func() bool { return paNames(store)["late"] != nil },
		},
		{
			kind: destinationRules,
			create: func() error {
				_, err := env.Istio.NetworkingV1().DestinationRules(ns).Create(ctx, &networkingv1.DestinationRule{
					ObjectMeta: metav1.ObjectMeta{Name: "late"},
					Spec:       apinetworking.DestinationRule{Host: "reviews"},
				}, metav1.CreateOptions{})
				return err
			},
			seen: func() bool { return drNames(store)["late"] != nil },
		},
	} {
		t.Run(tc.kind.kind, func(t *testing.T) {
			installCRD(t, tc.kind)
			if err := tc.create(); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the "+tc.kind.kind+" in the store", tc.seen)
			if line := logLine(logs.String(), "the "+tc.kind.kind+" CRD is installed now; watching "+tc.kind.kind+"s"); !strings.Contains(line, "version=v1") {
				t.Errorf("the start of the %s watch is not logged with its version:\n%s", tc.kind.kind, logs)
			}
		})
	}
	if t.Failed() {
		return
	}
	// Each CRD was reported missing once, at start, and never again.
	for _, k := range istioKinds {
		if got := counterValue(t, metrics.CRDMissing.WithLabelValues(k.crd())); got != 1 {
			t.Errorf("missing %s CRD counted %v times, want 1", k.kind, got)
		}
	}
}

// logLine is the first line of logs that contains substr, or "".
func logLine(logs, substr string) string {
	for line := range strings.SplitSeq(logs, "\n") {
		if strings.Contains(line, substr) {
			return line
		}
	}
	return ""
}
