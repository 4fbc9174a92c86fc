package ca

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

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
type Keeper struct {
	kube    kubernetes.Interface
	opts    Options
	metrics *Metrics
	log     *slog.Logger
	// clock is the time as of which the key material read from the
	// Secrets is checked: the real one, but for tests.
	clock clock.Clock

	current   atomic.Pointer[Authority]
	ready     chan struct{}
	readyOnce sync.Once

	// lastRead is the Authority last read from the Secrets, installed or
	// not: its ignored certificates have been named, and are not named
	// again while the Secrets hold the same files.
	lastRead atomic.Pointer[Authority]

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
// change to either. Call it after Load.
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
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-bell:
			k.reload(plugged, selfSigned)
		}
	}
}

// reload applies LoadOrCreate's choice to the cached Secrets: cacerts when
// it exists, else istio-ca-secret. It never creates a root: a running CA
// whose Secrets both vanished keeps the root it has.
func (k *Keeper) reload(plugged, selfSigned corelisters.SecretNamespaceLister) {
	next, err := k.fromSecrets(plugged, selfSigned)
	cur := k.Current()
	// Each outcome is logged before it is counted: whoever sees the
	// counter move (an alert, a test) finds the reason already logged.
	if err != nil {
		k.log.Error("the CA keeps its current root: the changed CA Secret is not usable",
			"error", err, "inUse", string(cur.Source()), "signer", cur.cert.Subject.String())
		k.metrics.RootReloads.WithLabelValues("error").Inc()
		return
	}
	// Every event of either Secret (the informers' first list, an edit of
	// the one not in use, of a label) reads them again: only files that
	// changed are news.
	if !next.sameFiles(k.lastRead.Swap(next)) {
		next.warnOffPath(k.log)
	}
	if next.sameKeyMaterial(cur) {
		return
	}
	k.log.Info("the CA reloaded its key material", "source", string(next.Source()),
		"signer", next.cert.Subject.String(), "rootChanged", !next.rootPool.Equal(cur.rootPool),
		"rootExpiry", next.RootExpiry(), "certChainExpiry", next.CertChainExpiry())
	k.metrics.RootReloads.WithLabelValues("ok").Inc()
	k.install(next)
}

func (k *Keeper) fromSecrets(plugged, selfSigned corelisters.SecretNamespaceLister) (*Authority, error) {
	s, err := plugged.Get(PluggedSecretName)
	if err == nil {
		return authorityFromSecret(k.opts, s, k.clock.Now())
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	s, err = selfSigned.Get(SelfSignedSecretName)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("neither Secret %s nor %s exists in namespace %s", PluggedSecretName, SelfSignedSecretName, k.opts.Namespace)
	}
	if err != nil {
		return nil, err
	}
	return authorityFromSecret(k.opts, s, k.clock.Now())
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
