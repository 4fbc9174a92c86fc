package bootstrap

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/loadtest"
)

// BenchmarkRestartPopulated is a control plane restarting on a populated
// cluster, the standard scenario's objects: 5,000 Services in 50
// namespaces, each with an EndpointSlice of 10 ready endpoints, already in
// the API server. One op runs from New until /ready answers 200 (every
// source synced, the first push context built), and stops it again.
func BenchmarkRestartPopulated(b *testing.B) {
	env := kubetest.StartAtScale(b)
	inputs := &loadtest.KubeInputs{Scenario: loadtest.StandardScenario(), Kube: env.Kube, Istio: env.Istio}
	if err := inputs.Create(context.Background(), nil); err != nil {
		b.Fatal(err)
	}
	kubeconfig := filepath.Join(b.TempDir(), "kubeconfig")
	writeKubeconfig(b, env.Config, kubeconfig)

	b.ResetTimer()
	for b.Loop() {
		o := localOptions(b)
		o.Kubeconfig = kubeconfig
		o.SecureXDSAddr, o.Webhook.Addr, o.MonitoringAddr = "", "", ""
		o.LeaderElection.Enabled = false
		srv, err := New(o)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		waitReady(b, "http://"+srv.HTTPAddr().String()+"/ready")
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}

func waitReady(b *testing.B, url string) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatal("not ready within 2 minutes")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
