package loadtest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/testport"
	"github.com/meshpilot/meshpilot/pkg/bootstrap"
)

// inProcess is the real control plane (pkg/bootstrap) serving a directory,
// run inside the test so that the race detector sees the clients at work;
// Restart stops it and starts a new one on the same xDS address.
type inProcess struct {
	t      *testing.T
	dir    string
	addr   string
	cancel context.CancelFunc
	done   chan error
}

func (p *inProcess) start() {
	o := bootstrap.DefaultOptions()
	o.ConfigDir, o.XDSAddr = p.dir, p.addr
	o.SecureXDSAddr, o.HTTPAddr, o.MonitoringAddr, o.Webhook.Addr = "", "", "", ""
	o.LeaderElection.Enabled = false
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := bootstrap.New(o)
	if err != nil {
		p.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan error, 1)
	go func() { p.done <- srv.Run(ctx) }()
}

func (p *inProcess) stop() {
	p.cancel()
	if err := <-p.done; err != nil {
		p.t.Errorf("control plane: %v", err)
	}
}

func (p *inProcess) Restart(context.Context) (time.Time, time.Time, error) {
	p.stop()
	stopped := time.Now()
	p.start()
	return stopped, time.Now(), nil
}

// TestRunInProcess drives every phase with every kind of client against
// the real control plane on the directory source. It asserts what each
// phase must have measured, not how fast.
func TestRunInProcess(t *testing.T) {
	addr := testport.Addr(t)
	scn := Scenario{Services: 12, Endpoints: 2, Namespaces: 3, DestinationRules: true, Domain: "cluster.local"}
	cp := &inProcess{t: t, dir: t.TempDir(), addr: addr}
	// The scenario is in place before the control plane starts, so that
	// its first push context holds all of it. Written while it served,
	// with no time to settle, the files came in over several pushes that
	// could still be arriving when the endpoint phase began, and about
	// one run in 40 counted a change with a watcher less: a client that
	// did not hold the churned cluster at that moment.
	inputs := &DirInputs{Scenario: scn, Dir: cp.dir}
	if err := inputs.Create(context.Background(), func(int, int) {}); err != nil {
		t.Fatal(err)
	}
	cp.start()
	t.Cleanup(cp.stop)

	clients := map[Kind]int{KindSidecar: 2, KindSidecarDelta: 1, KindRouter: 1, KindGRPC: 2}
	cfg := Config{Scenario: scn, Inputs: inputs, InputsExist: true, Source: "dir", XDSAddr: addr,
		Clients: clients, GRPCTargets: 2, ControlPlane: cp, Usage: SelfSource{}, SampleInterval: 20 * time.Millisecond,
		EndpointChanges: 3, ConfigChanges: 2, ChurnRate: 100, Timeout: time.Minute, Settle: 0}
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{PhaseConnect: 6, PhaseRejoin: 6, PhaseEndpoints: 3 * 6, PhaseConfigDR: 2 * 6, PhaseConfigService: 2 * 4, PhaseReconnect: 6}
	if len(r.Phases) != len(want) {
		t.Fatalf("phases %+v, want %d", r.Phases, len(want))
	}
	for _, p := range r.Phases {
		if p.Skipped != "" || p.Latency.Count != want[p.Name] || p.Missed != 0 || p.Latency.Max < p.Latency.Min {
			t.Errorf("phase %s: %+v, want %d samples, none missed", p.Name, p, want[p.Name])
		}
		if p.Changes == 0 {
			continue
		}
		// Every change has several watchers, and no change can spread wider
		// than the phase's slowest sample from its fastest. The three figures
		// are each rounded to 0.01 ms, so they may disagree by up to 0.015 ms.
		const rounding = 0.02
		if f := p.FanOut; f == nil || f.Count != p.Changes || f.Min < 0 || f.Max > p.Latency.Max-p.Latency.Min+rounding {
			t.Errorf("phase %s: fan-out %+v, want one per change (%d), within [0, %.2f] ms", p.Name, f, p.Changes, p.Latency.Max-p.Latency.Min)
		}
	}
}
