package ca

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Keeper holds the CA's Authority and replaces it when the Secret it came
// from changes, so that an operator can rotate the plugged-in CA (cacerts)
// or istio-ca-secret without restarting the control plane. It is the
// AuthorityProvider of the gRPC service, the certificate authenticator and
// the serving certificates; Subscribe tells the rest (the published root,
// webhook caBundles) that the root may have changed.
//
// New key material that is not usable (a key that does not match, a
// certificate that may not sign or has expired, a chain that does not
// reach the root) never replaces a working Authority: the old one stays,
// the refusal is logged and counted (meshpilot_ca_root_reloads_total
// {result="error"}), and nothing falls back silently to the other Secret.
//
// Nor does key material that is not valid yet (a renewed intermediate
// added beside the old one ahead of time, a new CA that starts later):
// every peer would refuse a leaf whose chain holds it. That is no error:
// the Keeper signs with what it has until the new material has been valid
// for settleTime (a minute, so that peers whose clocks lag a little accept
// it too), then reads the Secrets again and takes it, without waiting for
// another change to them.
type Keeper struct {
	kube    kubernetes.Interface
	opts    Options
	metrics *Metrics
	log     *slog.Logger
	// clock is the time as of which the key material read from the
	// Secrets is checked, and wakes Watch when some of it becomes valid:
	// the real one, but for tests.
	clock clock.Clock

	current   atomic.Pointer[Authority]
	ready     chan struct{}
	readyOnce sync.Once

	// lastRead is the Authority last read from the Secrets, installed or
	// not: its ignored certificates have been named, and are not named
	// again while the Secrets hold the same files.
	lastRead atomic.Pointer[Authority]
	// lastHeldBack is the material last held back as early: it is logged
	// and counted once, not at every event of the Secrets.
	lastHeldBack atomic.Pointer[Authority]

	mu          sync.Mutex
	subscribers []chan struct{}
}

// NewKeeper needs a client that may get, list and watch the Secrets cacerts
// and istio-ca-secret in opts.Namespace, and create istio-ca-secret.
func NewKeeper(kube kubernetes.Interface, opts Options, metrics *Metrics) *Keeper {
	opts = opts.withDefaults()
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	return &Keeper{kube: kube, opts: opts, metrics: metrics, log: opts.Logger, clock: clock.RealClock{}, ready: make(chan struct{})}
}

// Current is the Authority in use; nil until Load succeeds.
func (k *Keeper) Current() *Authority { return k.current.Load() }

// Ready is closed once an Authority is loaded.
func (k *Keeper) Ready() <-chan struct{} { return k.ready }

// Subscribe returns a channel that receives a value after each replacement
// of the Authority. Changes that arrive before the receiver has read are
// merged into one: a subscriber reads Current when told, never the value
// sent. Subscribe before Load, so that no change goes unseen.
func (k *Keeper) Subscribe() <-chan struct{} {
	ch := make(chan struct{}, 1)
	k.mu.Lock()
	k.subscribers = append(k.subscribers, ch)
	k.mu.Unlock()
	return ch
}

// Load reads (or creates) the root with LoadOrCreate and puts it in use.
// Its error means there is no CA at all.
func (k *Keeper) Load(ctx context.Context) error {
	a, err := LoadOrCreate(ctx, k.kube, k.opts)
	if err != nil {
		k.metrics.RootReloads.WithLabelValues("error").Inc()
		return err
	}
	k.lastRead.Store(a) // LoadOrCreate has named what it ignores
	k.install(a)
	return nil
}

// Watch follows the two CA Secrets until ctx ends, and reloads on every
// change to either, and when a certificate they hold becomes valid. Call
// it after Load.
func (k *Keeper) Watch(ctx context.Context) error {
	if k.Current() == nil {
		return errors.New("ca: Keeper.Watch before a successful Load")
	}
	// One informer per Secret, each restricted to its name by a field
	// selector: the namespace's other Secrets are never cached, and RBAC
	// can grant list and watch on these two names only.
	watch := func(name string) (informers.SharedInformerFactory, corelisters.SecretNamespaceLister, cache.SharedIndexInformer) {
		f := informers.NewSharedInformerFactoryWithOptions(k.kube, 0,
			informers.WithNamespace(k.opts.Namespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
			}))
		s := f.Core().V1().Secrets()
		return f, s.Lister().Secrets(k.opts.Namespace), s.Informer()
	}
	pluggedFactory, plugged, pluggedInformer := watch(PluggedSecretName)
	selfFactory, selfSigned, selfInformer := watch(SelfSignedSecretName)

	// Events only ring a bell; the loop below reads both listers, so a
	// burst of changes costs one reload and the order of events between
	// the two informers does not matter.
	bell := make(chan struct{}, 1)
	ring := func(any) {
		select {
		case bell <- struct{}{}:
		default:
		}
	}
	for _, inf := range []cache.SharedIndexInformer{pluggedInformer, selfInformer} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    ring,
			UpdateFunc: func(_, obj any) { ring(obj) },
			DeleteFunc: ring,
		}); err != nil {
			return fmt.Errorf("ca: watching the CA Secrets: %w", err)
		}
	}
	pluggedFactory.Start(ctx.Done())
	selfFactory.Start(ctx.Done())
	defer func() {
		pluggedFactory.Shutdown()
		selfFactory.Shutdown()
	}()
	if !cache.WaitFor(ctx, "", pluggedInformer.HasSyncedChecker(), selfInformer.HasSyncedChecker()) {
		return nil // ctx ended
	}
	// wake rings at wakeAt, when a certificate of the Secret last read
	// becomes valid: no event of the informers would tell.
	var (
		wake   clock.Timer
		wakeAt time.Time
	)
	stopWake := func() {
		if wake != nil {
			wake.Stop()
			wake = nil
		}
	}
	defer stopWake()
	for {
		var woken <-chan time.Time
		if wake != nil {
			woken = wake.C()
		}
		var becameValid time.Time
		select {
		case <-ctx.Done():
			return nil
		case <-bell:
		case <-woken:
			becameValid = wakeAt
		}
		stopWake()
		if wakeAt = k.reload(plugged, selfSigned, becameValid); !wakeAt.IsZero() {
			wake = k.clock.NewTimer(wakeAt.Sub(k.clock.Now()))
		}
	}
}

// reload applies LoadOrCreate's choice to the cached Secrets: cacerts when
// it exists, else istio-ca-secret. It never creates a root: a running CA
// whose Secrets both vanished keeps the root it has.
//
// It returns the moment the same Secrets may give another result: when
// the next certificate of the one read settles (settledAuthority; zero
// when all have), for Watch to call it again then. becameValid is that
// moment when it is why reload runs, and zero after a change of the
// Secrets.
func (k *Keeper) reload(plugged, selfSigned corelisters.SecretNamespaceLister, becameValid time.Time) (readAgainAt time.Time) {
	s, err := k.secretInUse(plugged, selfSigned)
	var next *Authority
	if err == nil {
		next, readAgainAt, err = settledAuthority(k.opts, s, k.clock.Now())
	}
	cur := k.Current()
	// Each outcome is logged before it is counted: whoever sees the
	// counter move (an alert, a test) finds the reason already logged.
	if err != nil && k.heldBack(s, readAgainAt, cur) {
		return readAgainAt
	}
	if err != nil {
		attrs := []any{"error", err, "inUse", string(cur.Source()), "signer", cur.cert.Subject.String()}
		if !readAgainAt.IsZero() {
			attrs = append(attrs, "readAgainAt", readAgainAt)
		}
		k.log.Error("the CA keeps its current root: the changed CA Secret is not usable", attrs...)
		k.metrics.RootReloads.WithLabelValues("error").Inc()
		return readAgainAt
	}
	// Every event of either Secret (the informers' first list, an edit of
	// the one not in use, of a label) reads them again: only files that
	// changed are news.
	if !next.sameFiles(k.lastRead.Swap(next)) {
		next.warnOffPath(k.log)
	}
	if next.sameKeyMaterial(cur) {
		return readAgainAt
	}
	msg, attrs := "the CA reloaded its key material", []any{"source", string(next.Source()),
		"signer", next.cert.Subject.String(), "rootChanged", !next.rootPool.Equal(cur.rootPool),
		"rootExpiry", next.RootExpiry(), "certChainExpiry", next.CertChainExpiry()}
	if !becameValid.IsZero() {
		msg, attrs = "the CA switched to key material of its Secret that has settled", append(attrs, "settledAt", becameValid)
	}
	k.log.Info(msg, attrs...)
	k.metrics.RootReloads.WithLabelValues("ok").Inc()
	k.install(next)
	return readAgainAt
}

// heldBack reports whether s, not usable now, is only early: usable once
// every certificate of it has settled (settledAuthority). Such material is
// no error, and is said once in the log, with when the CA switches to it;
// not at all when it is what the CA signs with already (a start with
// nothing else to sign with took it early).
func (k *Keeper) heldBack(s *corev1.Secret, settleAt time.Time, cur *Authority) bool {
	if settleAt.IsZero() {
		return false
	}
	last := settleAt
	for next := settleAt; !next.IsZero(); next = nextSettling(s, last) {
		last = next
	}
	later, _, err := settledAuthority(k.opts, s, last)
	if err != nil {
		return false
	}
	if !later.sameKeyMaterial(cur) && !later.sameFiles(k.lastHeldBack.Swap(later)) {
		k.log.Info("the CA holds back new key material of its Secret until it has been valid for a while",
			"source", string(later.Source()), "signer", later.cert.Subject.String(), "switchAt", settleAt, "settleTime", settleTime)
		k.metrics.RootReloads.WithLabelValues("held_back").Inc()
	}
	return true
}

// secretInUse is the Secret LoadOrCreate would take: cacerts when it
// exists, else istio-ca-secret.
func (k *Keeper) secretInUse(plugged, selfSigned corelisters.SecretNamespaceLister) (*corev1.Secret, error) {
	s, err := plugged.Get(PluggedSecretName)
	if !apierrors.IsNotFound(err) {
		return s, err
	}
	s, err = selfSigned.Get(SelfSignedSecretName)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("neither Secret %s nor %s exists in namespace %s", PluggedSecretName, SelfSignedSecretName, k.opts.Namespace)
	}
	return s, err
}

// nextNotBefore is the earliest NotBefore after now of the certificates
// of s; zero when all are valid already. A file that does not parse is
// skipped: it is refused whenever it is read.
func nextNotBefore(s *corev1.Secret, now time.Time) time.Time {
	var next time.Time
	for _, key := range []string{CACertKey, CertChainKey, RootCertKey} {
		certs, err := parseCertificates(s.Data[key])
		if err != nil {
			continue
		}
		for _, c := range certs {
			if c.NotBefore.After(now) && (next.IsZero() || c.NotBefore.Before(next)) {
				next = c.NotBefore
			}
		}
	}
	return next
}

// install puts a in use, updates the expiry gauges and, when it replaces
// another, tells subscribers; the first one they read on Ready.
func (k *Keeper) install(a *Authority) {
	previous := k.current.Swap(a)
	k.metrics.observeAuthority(a)
	k.readyOnce.Do(func() { close(k.ready) })
	if previous == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, ch := range k.subscribers {
		select {
		case ch <- struct{}{}:
		default: // a change is already pending for this one
		}
	}
}
