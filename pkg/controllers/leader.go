package controllers

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// DefaultLeaseName is the Lease that elects the replica writing Ingress
// status and Ingress Events (and, in the control plane, the other shared
// objects: istio-ca-root-cert and the webhooks' caBundle; the name stays
// for compatibility with running installs). Replicas of different revisions that must not
// share a leader append the revision to it.
const DefaultLeaseName = "meshpilot-ingress-status"

// Lease timings used when LeaderOptions leaves them zero: the usual
// Kubernetes controller values. A crashed leader is replaced within
// LeaseDuration; a leader that cannot renew for RenewDeadline steps down.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// LeaderOptions configures a LeaderElector.
type LeaderOptions struct {
	// Client reads and writes the Lease (coordination.k8s.io leases: get,
	// create, update).
	Client kubernetes.Interface
	// Namespace holds the Lease; required (meshpilot's own namespace).
	Namespace string
	// Name is the Lease's name; DefaultLeaseName when empty.
	Name string
	// Identity names this replica in the Lease; unique per process. When
	// empty, the host name (the pod name in Kubernetes) plus a random
	// suffix, so a restarted pod never mistakes its predecessor's lease
	// for its own.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod default to the Default*
	// constants; they must satisfy LeaseDuration > RenewDeadline >
	// 1.2 × RetryPeriod.
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	Logger        *slog.Logger
	// Metrics may be shared; nil creates unregistered ones.
	Metrics *IngressStatusMetrics
}

// LeaderElector runs functions only while this replica holds a Kubernetes
// Lease, so that of several meshpilot replicas exactly one writes Ingress
// status, Events and the other objects they share while the others stay
// silent. When leadership is lost the functions' context is cancelled,
// they are awaited, and the replica campaigns again. That context ends at
// the latest RenewDeadline after the last renewal of the Lease was sent,
// whatever client-go's elector is doing then, so it ends before a standby
// may take the Lease over. When Run's context ends, a held Lease is
// released at once so a standby replica takes over without waiting for it
// to expire.
type LeaderElector struct {
	opts    LeaderOptions
	log     *slog.Logger
	metrics *IngressStatusMetrics
	leading atomic.Bool

	mu   sync.Mutex
	runs []func(context.Context)
}

// NewLeaderElector checks the options and returns an elector; add the
// functions to run with AddRunFunction, then call Run.
func NewLeaderElector(opts LeaderOptions) (*LeaderElector, error) {
	if opts.Client == nil {
		return nil, errors.New("leader election: Client is required")
	}
	if opts.Namespace == "" {
		return nil, errors.New("leader election: Namespace is required")
	}
	opts.Name = cmp.Or(opts.Name, DefaultLeaseName)
	opts.LeaseDuration = cmp.Or(opts.LeaseDuration, DefaultLeaseDuration)
	opts.RenewDeadline = cmp.Or(opts.RenewDeadline, DefaultRenewDeadline)
	opts.RetryPeriod = cmp.Or(opts.RetryPeriod, DefaultRetryPeriod)
	if opts.Identity == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "meshpilot"
		}
		opts.Identity = host + "_" + rand.Text()[:10]
	}
	e := &LeaderElector{
		opts: opts,
		log: cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)).With("component", "leader-election",
			"lease", opts.Namespace+"/"+opts.Name, "identity", opts.Identity),
		metrics: opts.Metrics,
	}
	if e.metrics == nil {
		e.metrics = NewIngressStatusMetrics(nil)
	}
	// Validate the timings now rather than at Run.
	if _, err := e.newTermElector(context.Background(), &leaderTerm{}, e.newLeaseLock()); err != nil {
		return nil, err
	}
	e.metrics.Leader.WithLabelValues(opts.Name).Set(0)
	return e, nil
}

// AddRunFunction registers fn to run, in its own goroutine, for each term
// this replica leads. fn must return soon after its context is done. Call
// it before Run.
func (e *LeaderElector) AddRunFunction(fn func(ctx context.Context)) *LeaderElector {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runs = append(e.runs, fn)
	return e
}

// Identity is the name this replica holds the Lease under.
func (e *LeaderElector) Identity() string { return e.opts.Identity }

// IsLeader reports whether this replica is leading now.
func (e *LeaderElector) IsLeader() bool { return e.leading.Load() }

// Run campaigns for the Lease until ctx is done, running the functions
// during each term it wins. It returns after releasing the Lease and after
// every function of the last term has returned.
func (e *LeaderElector) Run(ctx context.Context) {
	for ctx.Err() == nil {
		t := &leaderTerm{}
		// The term's functions stop when ctx ends or when this replica
		// has gone RenewDeadline without renewing the Lease (see
		// termLock), whichever comes first.
		stopCtx, stopTerm := context.WithCancel(ctx)
		lock := newTermLock(e.newLeaseLock(), e.opts.RenewDeadline, func(lastRenewal time.Time) {
			e.log.Warn("the Lease was not renewed within the renew deadline; stopping leader-only work",
				"lastRenewalSent", lastRenewal, "renewDeadline", e.opts.RenewDeadline)
			stopTerm()
		})
		le, err := e.newTermElector(stopCtx, t, lock)
		if err != nil {
			stopTerm()
			e.log.Error("leader election misconfigured", "error", err)
			return // unreachable: NewLeaderElector validated the same config
		}
		// client-go releases the Lease as soon as the context it runs
		// under ends, and cancels the term's functions at the same moment,
		// so a write already under way could land after a standby took
		// over. So the elector runs under a context of its own that ends
		// once the term's functions have been stopped (see lead) and have
		// returned.
		electorCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		stop := context.AfterFunc(stopCtx, func() {
			t.end()
			cancel()
		})
		le.Run(electorCtx)
		stop()
		cancel()
		lock.stop()
		stopTerm()
		t.end()
		if ctx.Err() == nil {
			e.log.Warn("lost leadership; campaigning again")
		}
	}
}

// leaderTerm is one run of client-go's elector. client-go starts
// OnStartedLeading in a goroutine and does not wait for it, so the term
// tracks the functions itself: once ended, nothing more may start, and end
// waits for whatever did start. Without this a late start could overlap the
// next term's functions.
type leaderTerm struct {
	mu    sync.Mutex
	ended bool
	wg    sync.WaitGroup
}

// start runs fn unless the term has ended.
func (t *leaderTerm) start(fn func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return false
	}
	t.wg.Go(fn)
	return true
}

func (t *leaderTerm) end() {
	t.mu.Lock()
	t.ended = true
	t.mu.Unlock()
	t.wg.Wait()
}

func (e *LeaderElector) newLeaseLock() *resourcelock.LeaseLock {
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.opts.Namespace, Name: e.opts.Name},
		Client:     e.opts.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.opts.Identity},
	}
}

// newTermElector returns client-go's elector for one term; ctx stops the
// term's functions (see lead).
func (e *LeaderElector) newTermElector(ctx context.Context, t *leaderTerm, lock resourcelock.Interface) (*leaderelection.LeaderElector, error) {
	return leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            e.opts.Name,
		LeaseDuration:   e.opts.LeaseDuration,
		RenewDeadline:   e.opts.RenewDeadline,
		RetryPeriod:     e.opts.RetryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(termCtx context.Context) { e.lead(ctx, termCtx, t) },
			OnStoppedLeading: e.stopLeading,
			OnNewLeader: func(identity string) {
				if identity != e.opts.Identity {
					e.log.Info("another replica leads", "leader", identity)
				}
			},
		},
	})
}

// lead runs the registered functions for one term and waits for them.
// They stop when the term ends (termCtx) or ctx ends (Run's caller stops,
// or the Lease went unrenewed for RenewDeadline), whichever comes first:
// on such a stop the Lease is released only after they have returned.
func (e *LeaderElector) lead(ctx, termCtx context.Context, t *leaderTerm) {
	e.mu.Lock()
	runs := append([]func(context.Context){}, e.runs...)
	e.mu.Unlock()
	runCtx, cancel := context.WithCancel(termCtx)
	stop := context.AfterFunc(ctx, cancel)
	started := t.start(func() {
		defer cancel()
		defer stop()
		if runCtx.Err() != nil {
			return // the term was over before it began
		}
		e.leading.Store(true)
		e.metrics.Leader.WithLabelValues(e.opts.Name).Set(1)
		e.metrics.LeaderAcquisitions.WithLabelValues(e.opts.Name).Inc()
		e.log.Info("started leading")
		// Also here, not only in OnStoppedLeading: this goroutine may set
		// leading after client-go has already called that.
		defer e.stopLeading()
		var wg sync.WaitGroup
		for _, fn := range runs {
			wg.Go(func() { fn(runCtx) })
		}
		wg.Wait()
	})
	if !started {
		stop()
		cancel()
		e.log.Debug("leadership ended before its functions started")
	}
}

func (e *LeaderElector) stopLeading() {
	if e.leading.Swap(false) {
		e.metrics.Leader.WithLabelValues(e.opts.Name).Set(0)
		e.log.Info("stopped leading")
	}
}
