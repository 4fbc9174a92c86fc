package loadtest

import (
	"context"
	"fmt"
	"time"
)

// connect starts every client at once and waits until each holds a full
// config: the connect storm.
func (r *runner) connect(ctx context.Context, p *Phase) error {
	p.Measures = "from all clients connecting at once to each holding a full config (warm)"
	t0 := time.Now()
	for _, c := range r.clients {
		c.Start()
	}
	lat, missed, err := r.waitFull(ctx, PhaseConnect, nil, t0)
	p.setLatency(lat)
	p.Missed = missed
	return err
}

// rejoin has every client drop its connection and connect again at once,
// to the control plane that has just served it: what a fleet of proxies
// does when a network partition heals, or when its connections reach their
// maximum age and move to another replica. No configuration changed, so
// every response is already generated: the phase measures serving alone,
// and the connect storm's cost beyond it is the first generation.
func (r *runner) rejoin(ctx context.Context, p *Phase) error {
	p.Measures = "from all clients reconnecting at once, to a control plane that has served them, to each holding a full config again"
	streams := r.streams()
	t0 := time.Now()
	for _, c := range r.clients {
		if err := c.Rejoin(); err != nil {
			return err
		}
	}
	lat, missed, err := r.waitFull(ctx, PhaseRejoin, streams, t0)
	p.setLatency(lat)
	p.Missed = missed
	return err
}

// streams is how many streams each client has opened so far.
func (r *runner) streams() []int {
	n := make([]int, len(r.clients))
	for i, c := range r.clients {
		n[i], _ = c.Full()
	}
	return n
}

// waitFull waits until every client has opened more than streams streams
// and holds a full config on the latest, and returns the times from t0.
func (r *runner) waitFull(ctx context.Context, phase string, streams []int, t0 time.Time) ([]sample, int, error) {
	deadline := time.Now().Add(r.cfg.Timeout)
	lastReport := time.Now()
	for {
		var lat []sample
		for i, c := range r.clients {
			n, at := c.Full()
			if at.IsZero() || (streams != nil && n <= streams[i]) {
				continue
			}
			lat = append(lat, sample{c.Kind(), at.Sub(t0)})
		}
		if len(lat) == len(r.clients) {
			return lat, 0, nil
		}
		if time.Now().After(deadline) {
			missed := len(r.clients) - len(lat)
			for i, c := range r.clients {
				if n, at := c.Full(); at.IsZero() || (streams != nil && n <= streams[i]) {
					r.progressf("%s: not full after %v: %s", phase, r.cfg.Timeout, c.Summary())
					break
				}
			}
			return lat, missed, fmt.Errorf("%d of %d clients without a full config after %v", missed, len(r.clients), r.cfg.Timeout)
		}
		if time.Since(lastReport) > 2*time.Second {
			lastReport = time.Now()
			r.progressf("%s: %d/%d clients full after %.1fs", phase, len(lat), len(r.clients), time.Since(t0).Seconds())
		}
		select {
		case <-ctx.Done():
			return lat, len(r.clients) - len(lat), ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// change is one churn write and what its watchers must see.
type change struct {
	watchers []*Client
	arm      func(c *Client, notify func(time.Time))
	write    func(context.Context) error
}

// churn makes n changes, each once the previous was seen by every watcher
// (or Timeout passed) and no sooner than the churn rate allows, and
// measures from the start of each write to each watcher holding it.
func (r *runner) churn(ctx context.Context, p *Phase, name string, n int, next func(gen int) change) error {
	interval := time.Duration(float64(time.Second) / r.cfg.ChurnRate)
	var lat []sample
	var writes, fanOut []time.Duration
	pushes := map[string]int{}
	samples := 0
	nextAt := time.Now()
	lastReport := time.Now()
	for gen := 1; gen <= n; gen++ {
		if d := time.Until(nextAt); d > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d):
			}
		}
		ch := next(gen)
		if len(ch.watchers) == 0 {
			return fmt.Errorf("no client watches the churned service")
		}
		p.Watchers = len(ch.watchers)
		type seenAt struct {
			kind Kind
			at   time.Time
		}
		got := make(chan seenAt, len(ch.watchers))
		for _, c := range ch.watchers {
			k := c.Kind()
			ch.arm(c, func(at time.Time) { got <- seenAt{k, at} })
		}
		t0 := time.Now()
		if err := ch.write(ctx); err != nil {
			return err
		}
		writes = append(writes, time.Since(t0))
		nextAt = t0.Add(interval)
		timeout := time.NewTimer(r.cfg.Timeout)
		seen := 0
		var first, last time.Duration
	wait:
		for seen < len(ch.watchers) {
			select {
			case s := <-got:
				d := s.at.Sub(t0)
				lat = append(lat, sample{s.kind, d})
				if seen == 0 || d < first {
					first = d
				}
				last = max(last, d)
				seen++
			case <-timeout.C:
				break wait
			case <-ctx.Done():
				timeout.Stop()
				return ctx.Err()
			}
		}
		timeout.Stop()
		if seen > 1 {
			fanOut = append(fanOut, last-first)
		}
		p.Missed += len(ch.watchers) - seen
		p.Changes++
		for _, c := range ch.watchers {
			for k, v := range c.Pushes() {
				pushes[shortType(k)] += v
			}
			samples++
		}
		if time.Since(lastReport) > 2*time.Second || gen == n {
			lastReport = time.Now()
			r.progressf("%s: %d/%d changes, %d missed", name, gen, n, p.Missed)
		}
	}
	p.setLatency(lat)
	w := NewDist(writes)
	p.Writes = &w
	if len(fanOut) > 0 {
		f := NewDist(fanOut)
		p.FanOut = &f
	}
	p.PushesPerChange = map[string]float64{}
	for k, v := range pushes {
		p.PushesPerChange[k] = float64(v) / float64(max(samples, 1))
	}
	return nil
}

func (r *runner) watchersOf(typeURL, name string, proxyless bool) []*Client {
	var out []*Client
	for _, c := range r.clients {
		if c.Kind() == KindGRPC && !proxyless {
			continue
		}
		if c.Holds(typeURL, name) {
			out = append(out, c)
		}
	}
	return out
}

// endpoints changes one EndpointSlice; every client that fetches its load
// assignment must see the new address.
func (r *runner) endpoints(ctx context.Context, p *Phase) error {
	p.Measures = "from the EndpointSlice write to the EDS update at each watching client"
	svc := r.cfg.ChurnService
	cluster := r.cfg.Scenario.ClusterName(svc, servicePort)
	return r.churn(ctx, p, PhaseEndpoints, r.cfg.EndpointChanges, func(gen int) change {
		g := r.nonce + gen
		return change{
			watchers: r.watchersOf(EndpointType, cluster, true),
			arm: func(c *Client, notify func(time.Time)) {
				c.Expect(expectEndpoint, cluster, MarkerAddr(g), 0, notify)
			},
			write: func(ctx context.Context) error { return r.cfg.Inputs.SetEndpoints(ctx, svc, g) },
		}
	})
}

// configDR changes the churned service's DestinationRule; every client
// holding its cluster must serve the new circuit breaker (Envoy: once the
// changed cluster warmed).
func (r *runner) configDR(ctx context.Context, p *Phase) error {
	p.Measures = "from the DestinationRule write to each client serving the changed cluster"
	svc := r.cfg.ChurnService
	cluster := r.cfg.Scenario.ClusterName(svc, servicePort)
	return r.churn(ctx, p, PhaseConfigDR, r.cfg.ConfigChanges, func(gen int) change {
		v := int32(1 + (r.nonce+gen)%(1<<30))
		return change{
			watchers: r.watchersOf(ClusterType, cluster, true),
			arm: func(c *Client, notify func(time.Time)) {
				c.Expect(expectMaxRequests, cluster, "", uint32(v), notify)
			},
			write: func(ctx context.Context) error { return r.cfg.Inputs.SetDestinationRule(ctx, svc, v) },
		}
	})
}

// configService gives the churned service a new second port each time;
// every Envoy client must serve the new port's cluster. Proxyless clients
// dial port 80 only and never fetch it.
func (r *runner) configService(ctx context.Context, p *Phase) error {
	p.Measures = "from the Service write (a new port) to each Envoy client serving the new cluster"
	svc := r.cfg.ChurnService
	return r.churn(ctx, p, PhaseConfigService, r.cfg.ConfigChanges, func(gen int) change {
		port := int32(10000 + (r.nonce+gen)%50000)
		cluster := r.cfg.Scenario.ClusterName(svc, port)
		return change{
			watchers: r.watchersOf(ClusterType, r.cfg.Scenario.ClusterName(svc, servicePort), false),
			arm: func(c *Client, notify func(time.Time)) {
				c.Expect(expectCluster, cluster, "", 0, notify)
			},
			write: func(ctx context.Context) error { return r.cfg.Inputs.SetExtraPort(ctx, svc, port) },
		}
	})
}

// reconnect restarts the control plane and waits for every client to hold
// a full config again on a new stream.
func (r *runner) reconnect(ctx context.Context, p *Phase) error {
	if r.cfg.ControlPlane == nil {
		p.Skipped = "the tool did not start the control plane (give its command after --), so it cannot restart it"
		return nil
	}
	p.Measures = "from the new control-plane process starting to each client holding a full config again"
	streams := r.streams()
	before := time.Now()
	stopped, started, err := r.cfg.ControlPlane.Restart(ctx)
	if err != nil {
		return err
	}
	down := ms(stopped.Sub(before))
	p.DowntimeMs = &down
	lat, missed, err := r.waitFull(ctx, PhaseReconnect, streams, started)
	p.setLatency(lat)
	p.Missed = missed
	if len(lat) > 0 {
		first := p.Latency.Min
		p.FirstFullMs = &first
	}
	return err
}

// sample is one latency, and the kind of client it was measured at.
type sample struct {
	kind Kind
	d    time.Duration
}

// setLatency sets the phase's distribution, overall and by client kind.
func (p *Phase) setLatency(samples []sample) {
	all := make([]time.Duration, len(samples))
	by := map[Kind][]time.Duration{}
	for i, s := range samples {
		all[i] = s.d
		by[s.kind] = append(by[s.kind], s.d)
	}
	p.Latency = NewDist(all)
	if len(by) > 1 {
		p.ByKind = map[Kind]Dist{}
		for k, v := range by {
			p.ByKind[k] = NewDist(v)
		}
	}
}
