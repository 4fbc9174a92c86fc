package bootstrap

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshpilot/meshpilot/pkg/ca"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/xds"
)

// TestServiceDNSNames: both TLS listeners (15012 and the webhooks) are
// certified for the Service as clients name it, short to full, with the
// revision and the cluster's domain suffix.
func TestServiceDNSNames(t *testing.T) {
	for _, tc := range []struct {
		name, revision, service, suffix string
		want                            []string
	}{
		{name: "default revision", want: []string{"istiod", "istiod.mesh-system", "istiod.mesh-system.svc", "istiod.mesh-system.svc.cluster.local"}},
		{name: "canary", revision: "canary", want: []string{"istiod-canary", "istiod-canary.mesh-system", "istiod-canary.mesh-system.svc", "istiod-canary.mesh-system.svc.cluster.local"}},
		{name: "named service and suffix", service: "pilot", suffix: "corp.example", want: []string{"pilot", "pilot.mesh-system", "pilot.mesh-system.svc", "pilot.mesh-system.svc.corp.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := DefaultOptions()
			opts.Webhook.Namespace, opts.Revision, opts.Webhook.Service = "mesh-system", tc.revision, tc.service
			if tc.suffix != "" {
				opts.DomainSuffix = tc.suffix
			}
			if got := (&Server{opts: opts}).serviceDNSNames(); !slices.Equal(got, tc.want) {
				t.Errorf("names %v, want %v", got, tc.want)
			}
		})
	}
}

// TestReadinessWaitsForTheCARoot: with sources synced and a push context
// built, a replica whose CA has not loaded its root yet is not ready, for
// neither 15012 nor the webhooks can complete a handshake without it.
func TestReadinessWaitsForTheCARoot(t *testing.T) {
	push := xds.NewServer(xds.Options{Store: model.NewStore(), Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	go func() { defer close(started); push.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-started })
	<-push.Started()

	keeper := ca.NewKeeper(fake.NewClientset(), ca.Options{Namespace: "istio-system", Logger: slog.New(slog.DiscardHandler)}, ca.NewMetrics(nil))
	s := &Server{xds: push, ca: &meshCA{keeper: keeper}}
	if got, want := s.notReadyReason(), "waiting for the CA root"; got != want {
		t.Fatalf("before the root loads: not ready because %q, want %q", got, want)
	}
	if err := keeper.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.notReadyReason(); got != "" {
		t.Fatalf("with the root loaded: not ready because %q, want ready", got)
	}
}
