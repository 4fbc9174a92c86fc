package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/testlog"
	"github.com/meshpilot/meshpilot/pkg/bootstrap"
)

type controlPlaneOptions = bootstrap.Options

// controlPlane is `pilot discovery` in this process, on ephemeral ports.
type controlPlane struct {
	srv     *bootstrap.Server
	xdsAddr string
	// secureXDSAddr is the TLS xDS and CA listener (15012), "" without a
	// Kubernetes source.
	secureXDSAddr string
	httpURL       string
	stop          func(t *testing.T)
}

// withIdentity names the replica in leader election, so two control planes
// in one process compete for the lease as two pods would.
func withIdentity(id string) func(*bootstrap.Options) {
	return func(o *bootstrap.Options) { o.LeaderElection.Identity = id }
}

func startControlPlane(t *testing.T, m mesh, options ...func(*bootstrap.Options)) *controlPlane {
	t.Helper()
	opts := bootstrap.DefaultOptions()
	opts.XDSAddr, opts.HTTPAddr, opts.MonitoringAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	opts.SecureXDSAddr, opts.Webhook.Addr = "127.0.0.1:0", "127.0.0.1:0"
	opts.DebounceAfter = 20 * time.Millisecond
	opts.ShutdownGrace = 2 * time.Second
	logs := &testlog.Buffer{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// A stopping replica gives its Lease up, so a handover takes one retry
	// period (short here); the lease itself stays long, so that a loaded
	// machine's late renewal never hands leadership over by accident.
	opts.LeaderElection.LeaseDuration, opts.LeaderElection.RenewDeadline, opts.LeaderElection.RetryPeriod =
		15*time.Second, 10*time.Second, 200*time.Millisecond
	m.configure(&opts)
	for _, o := range options {
		o(&opts)
	}
	srv, err := bootstrap.New(opts)
	if err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var stopOnce sync.Once
	stop := func(t *testing.T) {
		stopOnce.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("control plane exited with error: %v", err)
			}
		})
	}
	t.Cleanup(func() {
		stop(t)
		if t.Failed() {
			t.Logf("control plane log:\n%s", logs.String())
		}
	})
	cp := &controlPlane{srv: srv, xdsAddr: srv.XDSAddr().String(), httpURL: "http://" + srv.HTTPAddr().String(), stop: stop}
	if a := srv.SecureXDSAddr(); a != nil {
		cp.secureXDSAddr = a.String()
	}
	waitFor(t, 60*time.Second, "control plane ready", func() error {
		code, body := cp.get(t, "/ready")
		if code != http.StatusOK {
			return fmt.Errorf("/ready: %d %s", code, body)
		}
		return nil
	})
	return cp
}

func (cp *controlPlane) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(cp.httpURL + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// nacks is the number of NACKs the control plane has received, of any type.
func (cp *controlPlane) nacks(t *testing.T) float64 {
	t.Helper()
	families, err := cp.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != "meshpilot_xds_nacks_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// configErrors sums the values of meshpilot_config_errors_total for objects
// of one kind, from every source and for every reason.
func (cp *controlPlane) configErrors(t *testing.T, kind string) float64 {
	t.Helper()
	families, err := cp.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != "meshpilot_config_errors_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// waitFor polls check until it succeeds or the deadline passes. Deadlines are
// generous: they bound a broken test, they do not measure speed.
func waitFor(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = check(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %v", what, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

var errNotYet = errors.New("not yet")
