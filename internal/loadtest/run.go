package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"
)

// The phases, in the order they run.
const (
	PhaseConnect       = "connect"
	PhaseRejoin        = "rejoin"
	PhaseEndpoints     = "endpoints"
	PhaseConfigDR      = "config-dr"
	PhaseConfigService = "config-service"
	PhaseReconnect     = "reconnect"
)

// PhaseNames lists every phase in run order.
var PhaseNames = []string{PhaseConnect, PhaseRejoin, PhaseEndpoints, PhaseConfigDR, PhaseConfigService, PhaseReconnect}

// Config is one run of the tool.
type Config struct {
	Scenario Scenario
	Inputs   Inputs
	// Source names where the inputs live ("kube" or "dir"), for the report.
	Source  string
	XDSAddr string
	// Clients is how many clients of each kind connect.
	Clients map[Kind]int
	// GRPCTargets is how many services (from the churned one on) each
	// proxyless client dials.
	GRPCTargets int
	// ChurnService is the index of the service the churn phases change.
	ChurnService int
	// ControlPlane restarts the control plane for the reconnect phase;
	// without it the phase is skipped.
	ControlPlane ControlPlane
	// Usage reads the control plane's CPU and RSS; without it they are not
	// reported.
	Usage Source
	// MetricsURL is the control plane's /metrics, to count its pushes.
	MetricsURL     string
	SampleInterval time.Duration
	// Phases to run; the connect phase always runs (the others need its
	// clients).
	Phases          []string
	EndpointChanges int
	ConfigChanges   int
	// ChurnRate is the highest rate of churn writes per second; a write
	// also waits until every watcher saw the previous one.
	ChurnRate float64
	// Timeout bounds every wait: all clients full, all watchers seeing one
	// change.
	Timeout time.Duration
	// InputsExist skips writing the scenario: an earlier run (or
	// `pilot load --write-only`) wrote it already.
	InputsExist bool
	// Settle bounds the wait for the control plane to go idle after the
	// inputs were written.
	Settle   time.Duration
	Progress io.Writer
}

// Validate checks a Config before anything is written.
func (c *Config) Validate() error {
	var errs []error
	if err := c.Scenario.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Inputs == nil {
		errs = append(errs, errors.New("no inputs"))
	}
	if c.XDSAddr == "" {
		errs = append(errs, errors.New("no xDS address"))
	}
	total := 0
	for k, n := range c.Clients {
		if n < 0 {
			errs = append(errs, fmt.Errorf("%s clients: %d is negative", k, n))
		}
		total += n
	}
	if total == 0 {
		errs = append(errs, errors.New("no clients: ask for sidecars, routers or gRPC clients"))
	}
	if c.Clients[KindGRPC] > 0 && (c.GRPCTargets < 1 || c.GRPCTargets > c.Scenario.Services) {
		errs = append(errs, fmt.Errorf("gRPC targets: want 1..services (%d), got %d", c.Scenario.Services, c.GRPCTargets))
	}
	if c.ChurnService < 0 || c.ChurnService >= c.Scenario.Services {
		errs = append(errs, fmt.Errorf("churn service: want 0..%d, got %d", c.Scenario.Services-1, c.ChurnService))
	}
	for _, p := range c.Phases {
		if !slices.Contains(PhaseNames, p) {
			errs = append(errs, fmt.Errorf("unknown phase %q (phases: %s)", p, strings.Join(PhaseNames, ", ")))
		}
	}
	if c.ChurnRate <= 0 {
		errs = append(errs, fmt.Errorf("churn rate must be positive, got %v", c.ChurnRate))
	}
	if c.EndpointChanges < 1 || c.ConfigChanges < 1 {
		errs = append(errs, errors.New("endpoint and config changes must be at least 1"))
	}
	if c.Timeout <= 0 || c.SampleInterval <= 0 {
		errs = append(errs, errors.New("timeout and sample interval must be positive"))
	}
	return errors.Join(errs...)
}

type runner struct {
	cfg     Config
	cp      *Sampler // nil without Usage
	self    *Sampler
	clients []*Client
	nonce   int // varies the churn values between runs on the same inputs
	report  *Report
}

// Run writes the inputs, connects the clients and runs the phases. The
// returned report holds whatever was measured, also when err is not nil.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	r := &runner{cfg: cfg, self: NewSampler(SelfSource{}, cfg.SampleInterval), nonce: rand.IntN(1 << 20),
		report: &Report{Version: ReportVersion, Started: time.Now().UTC().Truncate(time.Second),
			Scenario: cfg.Scenario, Source: cfg.Source, Clients: map[Kind]int{}}}
	for k, n := range cfg.Clients {
		if n > 0 {
			r.report.Clients[k] = n
		}
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	if cfg.Usage != nil {
		r.cp = NewSampler(cfg.Usage, cfg.SampleInterval)
		go r.cp.Run(sctx)
	}
	go r.self.Run(sctx)
	defer r.closeClients()
	err := r.run(ctx)
	end := time.Now()
	if r.cp != nil {
		r.report.PeakRSS = r.cp.Peak(time.Time{}, end)
		r.report.SampleErrors, _ = r.cp.Errors()
	}
	u := r.self.Now()
	r.report.ToolCPU, r.report.ToolPeakRSS = u.CPUSeconds, r.self.Peak(time.Time{}, end)
	return r.report, err
}

func (r *runner) closeClients() {
	for _, c := range r.clients {
		c.Close()
	}
}

func (r *runner) cpNow() Usage {
	if r.cp == nil {
		return Usage{}
	}
	return r.cp.Now()
}

func (r *runner) progressf(format string, args ...any) {
	fmt.Fprintf(r.cfg.Progress, "load: "+format+"\n", args...)
}

func (r *runner) run(ctx context.Context) error {
	// A control plane the tool just started is still starting up.
	r.settle(ctx)
	r.report.StartRSS = r.cpNow().RSSBytes
	start := time.Now()
	last := time.Now()
	if !r.cfg.InputsExist {
		if err := r.cfg.Inputs.Create(ctx, func(done, total int) {
			if done == total || time.Since(last) > 2*time.Second {
				last = time.Now()
				r.progressf("inputs: %d/%d services written", done, total)
			}
		}); err != nil {
			return fmt.Errorf("write inputs: %w", err)
		}
	}
	r.report.InputSeconds = time.Since(start).Seconds()
	settled := time.Now()
	r.settle(ctx)
	r.report.SettleSeconds = time.Since(settled).Seconds()
	r.report.LoadedRSS = r.cpNow().RSSBytes

	if err := r.newClients(); err != nil {
		return err
	}
	steps := []struct {
		name string
		fn   func(context.Context, *Phase) error
	}{
		{PhaseConnect, r.connect},
		{PhaseRejoin, r.rejoin},
		{PhaseEndpoints, r.endpoints},
		{PhaseConfigDR, r.configDR},
		{PhaseConfigService, r.configService},
		{PhaseReconnect, r.reconnect},
	}
	for _, s := range steps {
		if s.name != PhaseConnect && len(r.cfg.Phases) > 0 && !slices.Contains(r.cfg.Phases, s.name) {
			continue
		}
		if err := r.measure(ctx, s.name, s.fn); err != nil {
			return fmt.Errorf("phase %s: %w", s.name, err)
		}
	}
	return nil
}

// settle waits, up to Settle, until the control plane spends under 2% of
// a CPU over a second: it has caught up with the inputs.
func (r *runner) settle(ctx context.Context) {
	if r.cp == nil || r.cfg.Settle <= 0 {
		return
	}
	deadline := time.Now().Add(r.cfg.Settle)
	prev := r.cp.Now()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		cur := r.cp.Now()
		if cur.Instance != "" && prev.Instance == cur.Instance && cpuSince(prev, cur) < 0.02 {
			return
		}
		prev = cur
	}
	r.progressf("control plane still busy %v after the inputs were written; measuring anyway", r.cfg.Settle)
}

func (r *runner) newClients() error {
	idx := 0
	ns := r.cfg.Scenario.Namespace(r.cfg.ChurnService)
	var targets []string
	for i := range r.cfg.GRPCTargets {
		targets = append(targets, fmt.Sprintf("%s:%d", r.cfg.Scenario.Host((r.cfg.ChurnService+i)%r.cfg.Scenario.Services), servicePort))
	}
	for _, k := range []Kind{KindSidecar, KindSidecarDelta, KindRouter, KindGRPC} {
		for range r.cfg.Clients[k] {
			c, err := NewClient(r.cfg.XDSAddr, ClientOptions{Kind: k, Index: idx, Namespace: ns, Targets: targets})
			if err != nil {
				return err
			}
			r.clients = append(r.clients, c)
			idx++
		}
	}
	return nil
}

// measure runs one phase with the resource readings around it.
func (r *runner) measure(ctx context.Context, name string, fn func(context.Context, *Phase) error) error {
	p := Phase{Name: name}
	// Scraped outside the readings, so that rendering /metrics is not
	// counted as the phase's CPU.
	pushes0, present0, ok0 := r.serverPushes()
	cp0, self0, t0 := r.cpNow(), r.self.Now(), time.Now()
	err := fn(ctx, &p)
	cp1, self1, t1 := r.cpNow(), r.self.Now(), time.Now()
	if p.Skipped == "" {
		p.DurationSeconds = t1.Sub(t0).Seconds()
		if r.cp != nil {
			p.ControlPlaneCPU = cpuSince(cp0, cp1)
			p.ControlPlanePeakRSS = r.cp.Peak(t0, t1)
			if n, ok := counterSince(cp0, cp1, contextSwitches); ok {
				p.ControlPlaneSwitches = &n
			}
			if s, ok := counterSince(cp0, cp1, systemCPU); ok {
				p.ControlPlaneSystemCPU = &s
			}
			if n, ok := counterSince(cp0, cp1, pageFaults); ok {
				p.ControlPlanePageFaults = &n
			}
		}
		p.ToolCPU = cpuSince(self0, self1)
		// Not across a restart, which starts the count again; and not from
		// a control plane that has no such counter.
		pushes1, present1, ok1 := r.serverPushes()
		if ok0 && ok1 && (present0 || present1) && name != PhaseReconnect {
			d := pushes1 - pushes0
			p.ServerPushes = &d
		}
	}
	r.report.Phases = append(r.report.Phases, p)
	r.progressf("%s: done", name)
	return err
}

// serverPushes reads meshpilot_xds_pushes_total from the control plane's
// /metrics; ok is false when they could not be read. A counter vector
// shows no series until its first push, so before it the count is 0 and
// present false.
func (r *runner) serverPushes() (n float64, present, ok bool) {
	if r.cfg.MetricsURL == "" {
		return 0, false, false
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(r.cfg.MetricsURL)
	if err != nil {
		return 0, false, false
	}
	defer resp.Body.Close()
	v, err := scrape(resp.Body, "meshpilot_xds_pushes_total")
	if err != nil {
		return 0, false, false
	}
	n, present = v["meshpilot_xds_pushes_total"]
	return n, present, true
}
