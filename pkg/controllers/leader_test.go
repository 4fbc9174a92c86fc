package controllers

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

func TestNewLeaderElectorOptions(t *testing.T) {
	client := kubefake.NewClientset()
	cases := []struct {
		name    string
		opts    LeaderOptions
		wantErr string
	}{
		{name: "defaults", opts: LeaderOptions{Client: client, Namespace: "istio-system"}},
		{name: "no client", opts: LeaderOptions{Namespace: "istio-system"}, wantErr: "Client is required"},
		{name: "no namespace", opts: LeaderOptions{Client: client}, wantErr: "Namespace is required"},
		{name: "renew deadline not below lease duration", wantErr: "leaseDuration must be greater than renewDeadline",
			opts: LeaderOptions{Client: client, Namespace: "ns", LeaseDuration: time.Second, RenewDeadline: time.Second}},
		{name: "retry period too close to renew deadline", wantErr: "renewDeadline must be greater than retryPeriod",
			opts: LeaderOptions{Client: client, Namespace: "ns", RenewDeadline: time.Second, RetryPeriod: time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := NewLeaderElector(tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if e.opts.Name != DefaultLeaseName || e.opts.LeaseDuration != DefaultLeaseDuration ||
				e.opts.RenewDeadline != DefaultRenewDeadline || e.opts.RetryPeriod != DefaultRetryPeriod {
				t.Errorf("defaults not applied: %+v", e.opts)
			}
			other, err := NewLeaderElector(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if e.Identity() == "" || e.Identity() == other.Identity() {
				t.Errorf("identities %q and %q must be set and distinct", e.Identity(), other.Identity())
			}
		})
	}
}

func TestLeaderTerm(t *testing.T) {
	// A start that comes after the term ended runs nothing.
	ended := &leaderTerm{}
	ended.end()
	if ended.start(func() { t.Error("ran after the term ended") }) {
		t.Error("start after end reported success")
	}

	// end waits for what started.
	running := &leaderTerm{}
	release := make(chan struct{})
	var finished atomic.Bool
	if !running.start(func() {
		<-release
		finished.Store(true)
	}) {
		t.Fatal("start refused on a live term")
	}
	go close(release)
	running.end()
	if !finished.Load() {
		t.Error("end returned before the function finished")
	}
}

// TestLeaderElectorCampaignsAgain makes the leader fail to renew: its
// functions stop and it is no longer leader; when the API server accepts
// renewals again it wins a new term and runs them again.
func TestLeaderElectorCampaignsAgain(t *testing.T) {
	client := kubefake.NewClientset()
	var failUpdates atomic.Bool
	failWhile(client, &failUpdates, "update", "leases", "injected: API server unavailable")
	metrics := NewIngressStatusMetrics(prometheus.NewRegistry())
	e, err := NewLeaderElector(LeaderOptions{Client: client, Namespace: "ns", Identity: "me",
		LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
		Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	// Terms are counted, and two of them must never overlap; how many a
	// loaded machine goes through (a renewal may miss its deadline) is not
	// the test's business.
	var starts, stops, running, overlaps atomic.Int32
	e.AddRunFunction(func(ctx context.Context) {
		starts.Add(1)
		if running.Add(1) > 1 {
			overlaps.Add(1)
		}
		<-ctx.Done()
		running.Add(-1)
		stops.Add(1)
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { e.Run(ctx) })

	eventually(t, "a first term", func() bool { return starts.Load() >= 1 && e.IsLeader() })
	failUpdates.Store(true)
	eventually(t, "the term lost", func() bool { return stops.Load() == starts.Load() && !e.IsLeader() })
	lost := starts.Load()
	failUpdates.Store(false)
	eventually(t, "a new term", func() bool { return starts.Load() > lost && e.IsLeader() })
	if got, want := counterValue(t, metrics.LeaderAcquisitions.WithLabelValues(DefaultLeaseName)), float64(starts.Load()); got != want {
		t.Errorf("acquisitions = %v, want one per term (%v)", got, want)
	}

	cancel()
	wg.Wait()
	if stops.Load() != starts.Load() || e.IsLeader() {
		t.Errorf("after Run returned: %d terms started, %d stopped, leader = %v", starts.Load(), stops.Load(), e.IsLeader())
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d terms started while another was running", n)
	}
}

// TestLeaderElectorTakesOverFromACrashedLeader kills the leader the way a
// SIGKILL or a partition does: from one moment on it reaches the API server
// no more, so it neither renews nor releases its Lease. The standby must
// leave the Lease alone while it is still valid, then take over once it
// has expired: a crashed leader cannot hand over, so expiry is the only
// way on.
func TestLeaderElectorTakesOverFromACrashedLeader(t *testing.T) {
	// Two replicas on one API server: the standby's client reads and
	// writes the leader's object tracker, the leader's fails once crashed.
	leaderClient := kubefake.NewClientset()
	var crashed atomic.Bool
	failWhile(leaderClient, &crashed, "*", "*", "injected: the leader process is gone")
	standbyClient := kubefake.NewClientset()
	standbyClient.PrependReactor("*", "*", k8stesting.ObjectReaction(leaderClient.Tracker()))

	const leaseDuration = 3 * time.Second
	elector := func(client *kubefake.Clientset, identity string) *LeaderElector {
		e, err := NewLeaderElector(LeaderOptions{Client: client, Namespace: "ns", Identity: identity,
			LeaseDuration: leaseDuration, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		// A replica leads while its leader-only work runs.
		return e.AddRunFunction(func(ctx context.Context) { <-ctx.Done() })
	}
	leader, standby := elector(leaderClient, "leader"), elector(standbyClient, "standby")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() { leader.Run(ctx) })
	eventually(t, "the first replica leading", leader.IsLeader)
	wg.Go(func() { standby.Run(ctx) })

	// Let the standby see the Lease renewed a few times, then crash the
	// leader.
	time.Sleep(500 * time.Millisecond)
	crashed.Store(true)
	crashedAt := time.Now()

	// client-go's standby counts the lease duration from when it last saw
	// the Lease change, which may be a poll or two before the crash. Half
	// the duration is far from that, and far from the moment a released
	// Lease would be taken.
	for time.Since(crashedAt) < leaseDuration/2 {
		if standby.IsLeader() {
			t.Fatalf("the standby took over %v after the crash, while the Lease was valid", time.Since(crashedAt))
		}
		time.Sleep(10 * time.Millisecond)
	}
	eventually(t, "the standby leading after the Lease expired", standby.IsLeader)
	if leader.IsLeader() {
		// RenewDeadline (1s) has long passed without a renewal.
		t.Error("the crashed leader still believes it leads")
	}
	lease, err := standbyClient.CoordinationV1().Leases("ns").Get(ctx, DefaultLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holder := ptrValue(lease.Spec.HolderIdentity); holder != "standby" {
		t.Errorf("the Lease is held by %q, want the standby", holder)
	}
}

// failWhile makes client's calls of verb on resource fail with msg while
// fail is set, as an API server out of reach would.
func failWhile(client *kubefake.Clientset, fail *atomic.Bool, verb, resource, msg string) {
	client.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		if fail.Load() {
			return true, nil, errors.New(msg)
		}
		return false, nil, nil
	})
}

// TestLeaderReleasesAfterItsWritersStop: on shutdown the Lease is handed
// back only once the leader-only functions have returned, so that a write
// they still had under way cannot land after a standby took over.
// (client-go's own release happens as the functions are cancelled.)
func TestLeaderReleasesAfterItsWritersStop(t *testing.T) {
	client := kubefake.NewClientset()
	var released, writerDone atomic.Int64 // Unix ns
	client.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		lease, ok := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if ok && ptrValue(lease.Spec.HolderIdentity) == "" {
			released.CompareAndSwap(0, time.Now().UnixNano())
		}
		return false, nil, nil
	})
	e, err := NewLeaderElector(LeaderOptions{Client: client, Namespace: "ns", Identity: "me",
		LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const lastWrite = 200 * time.Millisecond
	e.AddRunFunction(func(ctx context.Context) {
		<-ctx.Done()
		time.Sleep(lastWrite) // a status update finishing
		writerDone.Store(time.Now().UnixNano())
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { e.Run(ctx) })
	eventually(t, "leading", e.IsLeader)
	cancel()
	wg.Wait()
	switch r, w := released.Load(), writerDone.Load(); {
	case w == 0:
		t.Fatal("Run returned before the leader-only function")
	case r == 0:
		t.Fatal("the Lease was not released on shutdown")
	case r < w:
		t.Errorf("the Lease was released %v before the leader-only function returned", time.Duration(w-r))
	}
}

// fakeLock is a resourcelock.Interface whose writes succeed after delay;
// it notes when the last one was called. Get finds holder.
type fakeLock struct {
	resourcelock.Interface // only what the test calls is implemented
	identity, holder       string
	delay                  time.Duration
	called                 time.Time
}

func (f *fakeLock) Identity() string { return f.identity }
func (f *fakeLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return &resourcelock.LeaderElectionRecord{HolderIdentity: f.holder}, nil, nil
}
func (f *fakeLock) Create(context.Context, resourcelock.LeaderElectionRecord) error {
	f.called = time.Now()
	time.Sleep(f.delay)
	return nil
}
func (f *fakeLock) Update(context.Context, resourcelock.LeaderElectionRecord) error {
	f.called = time.Now()
	time.Sleep(f.delay)
	return nil
}

// TestTermLockCountsFromTheSend: leadership lapses RenewDeadline after the
// last renewal was sent; an answer that comes late does not extend it, and
// neither does a write that hands the Lease back.
func TestTermLockCountsFromTheSend(t *testing.T) {
	const renewDeadline = 300 * time.Millisecond
	inner := &fakeLock{identity: "me", holder: "me"}
	expired := make(chan time.Time, 2)
	var expiredAt atomic.Int64
	lock := newTermLock(inner, renewDeadline, func(last time.Time) {
		expiredAt.Store(time.Now().UnixNano())
		expired <- last
	})
	defer lock.stop()
	held := resourcelock.LeaderElectionRecord{HolderIdentity: "me"}
	ctx := context.Background()

	if err := lock.Create(ctx, held); err != nil {
		t.Fatal(err)
	}
	// A renewal whose answer takes two thirds of the deadline.
	inner.delay = 2 * renewDeadline / 3
	sent := time.Now()
	if err := lock.Update(ctx, held); err != nil {
		t.Fatal(err)
	}
	called, answered := inner.called, time.Now()
	// A release, answered at once (client-go reads the Lease first).
	inner.delay = 0
	if _, _, err := lock.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{}); err != nil {
		t.Fatal(err)
	}

	var last time.Time
	select {
	case last = <-expired:
	case <-time.After(20 * time.Second):
		t.Fatal("never expired")
	}
	if last.Before(sent) || last.After(called) {
		t.Errorf("counted from %v after the slow renewal was sent, want its send (answered %v after)",
			last.Sub(sent), answered.Sub(sent))
	}
	if at := time.Unix(0, expiredAt.Load()); at.Before(last.Add(renewDeadline)) {
		t.Errorf("expired %v after the last renewal, before the renew deadline (%v)", at.Sub(last), renewDeadline)
	}
	// Once expired, a late renewal changes nothing.
	if err := lock.Update(ctx, held); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * renewDeadline)
	if len(expired) != 0 {
		t.Error("expired twice")
	}
}

// TestTermLockReleasesOnlyItsOwnLease: a release is refused when the Lease
// was last read held by another replica, and goes through when held by
// this one.
func TestTermLockReleasesOnlyItsOwnLease(t *testing.T) {
	inner := &fakeLock{identity: "me", holder: "other"}
	lock := newTermLock(inner, time.Minute, func(time.Time) {})
	defer lock.stop()
	ctx := context.Background()
	release := resourcelock.LeaderElectionRecord{}
	if _, _, err := lock.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lock.Update(ctx, release); err == nil || !strings.Contains(err.Error(), `"other" holds it`) {
		t.Errorf("releasing another replica's Lease: error = %v", err)
	}
	if !inner.called.IsZero() {
		t.Error("the refused release was sent")
	}
	inner.holder = "me"
	if _, _, err := lock.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lock.Update(ctx, release); err != nil || inner.called.IsZero() {
		t.Errorf("releasing this replica's Lease: error = %v, sent = %v", err, !inner.called.IsZero())
	}
}
