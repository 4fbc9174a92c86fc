package controllers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testlog"
)

// leaseTraffic sits between one elector's client and the API server. It
// notes when the last Lease write naming this replica the holder that the
// API server accepted was sent, and on demand fails such writes (renewals)
// or holds the writes that hand the Lease back (releases).
type leaseTraffic struct {
	next     http.RoundTripper
	identity string

	failRenewals atomic.Bool
	holdReleases chan struct{} // closed to let held releases through
	releasing    atomic.Int32  // releases being held

	mu           sync.Mutex
	lastHeldSent time.Time
}

func (l *leaseTraffic) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.Contains(req.URL.Path, "/leases") || (req.Method != http.MethodPut && req.Method != http.MethodPost) {
		return l.next.RoundTrip(req)
	}
	lease, err := leaseOf(req)
	if err != nil {
		return nil, err
	}
	if ptrValue(lease.Spec.HolderIdentity) != l.identity {
		// A release: it waits for the test, whatever the client's
		// context says, as a call stuck in the network would.
		l.releasing.Add(1)
		defer l.releasing.Add(-1)
		<-l.holdReleases
		return l.next.RoundTrip(req)
	}
	if l.failRenewals.Load() {
		return nil, errors.New("injected: the API server refuses the renewal")
	}
	sent := time.Now()
	resp, err := l.next.RoundTrip(req)
	if err == nil && resp.StatusCode/100 == 2 {
		l.mu.Lock()
		l.lastHeldSent = sent
		l.mu.Unlock()
	}
	return resp, err
}

func (l *leaseTraffic) lastHeld() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastHeldSent
}

// TestLeaderWritersStopWithoutARenewalWhileReleaseHangs: when renewals fail,
// the leader-only functions must stop within RenewDeadline of the last
// renewal that was sent and accepted, well before a standby may take the
// Lease (LeaseDuration after it), whatever client-go is doing meanwhile.
// Here it is stuck handing the Lease back: client-go cancels the term's
// context only after that release returns, so the writers must not wait
// for it.
func TestLeaderWritersStopWithoutARenewalWhileReleaseHangs(t *testing.T) {
	env := kubetest.StartWithoutCRDs(t)
	ns := env.Namespace(t, "leader")

	const (
		identity      = "me"
		leaseDuration = 5 * time.Second
		renewDeadline = 2 * time.Second
		// The timer and two goroutines between the deadline and the
		// writer seeing its context end; generous for a busy machine and
		// still well under LeaseDuration.
		slack = 1500 * time.Millisecond
	)
	traffic := &leaseTraffic{identity: identity, holdReleases: make(chan struct{})}
	cfg := rest.CopyConfig(env.Config)
	cfg.ContentType = "application/json" // so that the Lease written can be read
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		traffic.next = rt
		return traffic
	})
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("elector logs:\n%s", logs.String())
		}
	})
	e, err := NewLeaderElector(LeaderOptions{Client: client, Namespace: ns, Identity: identity,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: 250 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	stopped := make(chan time.Time, 1)
	e.AddRunFunction(func(ctx context.Context) {
		started <- struct{}{}
		<-ctx.Done()
		stopped <- time.Now()
	})
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		e.Run(ctx)
	}()
	t.Cleanup(func() {
		close(traffic.holdReleases)
		cancel()
		<-runDone
	})

	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("never started leading")
	}
	// A few renewals go through, then the API server refuses them.
	time.Sleep(time.Second)
	traffic.failRenewals.Store(true)

	var stoppedAt time.Time
	select {
	case stoppedAt = <-stopped:
	case <-time.After(3 * leaseDuration):
		t.Fatalf("the writers still ran %v after the last renewal (releases held: %d)",
			time.Since(traffic.lastHeld()), traffic.releasing.Load())
	}
	since := stoppedAt.Sub(traffic.lastHeld())
	t.Logf("the writers stopped %v after the last renewal was sent", since)
	if since > renewDeadline+slack {
		t.Errorf("the writers stopped %v after the last renewal was sent, want at most RenewDeadline (%v) + %v",
			since, renewDeadline, slack)
	}
	// client-go goes on to hand the Lease back, which hangs; the writers
	// did not wait for it.
	eventually(t, "client-go releasing the Lease", func() bool { return traffic.releasing.Load() > 0 })
	select {
	case <-runDone:
		t.Error("Run returned while the release was held")
	default:
	}
}

// pausableLeases holds an elector's Lease requests while paused, as if its
// process had been stopped, and sends them when it resumes. It counts the
// releases (writes naming no holder) that the API server accepted.
type pausableLeases struct {
	next http.RoundTripper

	mu       sync.Mutex
	resumed  chan struct{} // nil when not paused
	released int
}

func (p *pausableLeases) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resumed = make(chan struct{})
}

func (p *pausableLeases) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.resumed)
	p.resumed = nil
}

func (p *pausableLeases) releases() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.released
}

func (p *pausableLeases) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.Contains(req.URL.Path, "/leases") {
		return p.next.RoundTrip(req)
	}
	p.mu.Lock()
	resumed := p.resumed
	p.mu.Unlock()
	if resumed != nil {
		<-resumed // a stopped process sends nothing, whatever its deadlines
	}
	if req.Method != http.MethodPut {
		return p.next.RoundTrip(req)
	}
	lease, err := leaseOf(req)
	if err != nil {
		return nil, err
	}
	resp, err := p.next.RoundTrip(req)
	if err == nil && resp.StatusCode/100 == 2 && ptrValue(lease.Spec.HolderIdentity) == "" {
		p.mu.Lock()
		p.released++
		p.mu.Unlock()
	}
	return resp, err
}

// TestLeaderReleaseLeavesALeaseAnotherReplicaTook: a leader paused for
// longer than LeaseDuration (a stopped process, a frozen VM) finds on waking
// that a standby has taken the Lease. Handing the Lease back then would end
// the standby's term, so it must not: client-go reads the Lease just before
// releasing it, so the API server's resourceVersion check does not catch
// this, and it decides from what it saw before the pause.
func TestLeaderReleaseLeavesALeaseAnotherReplicaTook(t *testing.T) {
	env := kubetest.StartWithoutCRDs(t)
	ns := env.Namespace(t, "leader")
	const leaseDuration = 3 * time.Second

	paused := &pausableLeases{}
	cfg := rest.CopyConfig(env.Config)
	cfg.ContentType = "application/json" // so that the Lease written can be read
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		paused.next = rt
		return paused
	})
	pausedClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	logs := map[string]*testlog.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			for id, l := range logs {
				t.Logf("%s logs:\n%s", id, l.String())
			}
		}
	})
	elector := func(client kubernetes.Interface, identity string) *LeaderElector {
		logs[identity] = &testlog.Buffer{}
		e, err := NewLeaderElector(LeaderOptions{Client: client, Namespace: ns, Identity: identity,
			LeaseDuration: leaseDuration, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(logs[identity], nil))})
		if err != nil {
			t.Fatal(err)
		}
		return e.AddRunFunction(func(ctx context.Context) { <-ctx.Done() })
	}
	sleeper, standby := elector(pausedClient, "sleeper"), elector(env.Kube, "standby")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() { sleeper.Run(ctx) })
	eventually(t, "the sleeper leading", sleeper.IsLeader)
	wg.Go(func() { standby.Run(ctx) })

	paused.pause()
	eventually(t, "the standby taking over the expired Lease", standby.IsLeader)
	paused.resume()
	// The sleeper's term ends: the renewal it had under way is refused,
	// and client-go tries to release.
	eventually(t, "the sleeper campaigning again", func() bool {
		return strings.Contains(logs["sleeper"].String(), "lost leadership")
	})
	if n := paused.releases(); n != 0 {
		t.Errorf("the API server accepted %d releases from the sleeper after the standby took the Lease", n)
	}
	if !standby.IsLeader() {
		t.Error("the standby no longer leads")
	}
}

// leaseOf decodes the Lease a request writes, and leaves the body for the
// request to send.
func leaseOf(req *http.Request) (coordinationv1.Lease, error) {
	var lease coordinationv1.Lease
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return lease, err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	return lease, json.Unmarshal(body, &lease)
}
