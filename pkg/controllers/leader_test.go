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
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
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
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failUpdates.Load() {
			return true, nil, errors.New("injected: API server unavailable")
		}
		return false, nil, nil
	})
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
