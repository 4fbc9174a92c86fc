package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	admissionlisters "k8s.io/client-go/listers/admissionregistration/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// revisionLabel marks the objects of a control-plane revision.
const revisionLabel = "istio.io/rev"

// DefaultValidatorName is the base chart's validator for objects without a
// revision label. The default revision's control plane (the one whose
// revision its istio.io/rev label names) keeps its caBundle.
const DefaultValidatorName = "istiod-default-validator"

// configKind names the two webhook configuration kinds in keys and metrics.
type configKind string

const (
	mutatingKind   configKind = "MutatingWebhookConfiguration"
	validatingKind configKind = "ValidatingWebhookConfiguration"
)

type configKey struct {
	kind configKind
	name string
}

// BundleOptions configure a BundlePatcher.
type BundleOptions struct {
	// Client is the Kubernetes API; required.
	Client kubernetes.Interface
	// Namespace is the control plane's; it names the validator.
	Namespace string
	// Revision selects the MutatingWebhookConfigurations to patch: those
	// labelled istio.io/rev=Revision ("default" when empty), which covers
	// the injector and the revision tags pointing at it.
	Revision string
	// ValidatorName is the ValidatingWebhookConfiguration to patch;
	// defaults to ValidatorConfigName(Revision, Namespace).
	ValidatorName string
	// Bundle is what the API server must trust to call the webhooks: the
	// mesh root, which signs their serving certificate. Empty while unknown.
	Bundle func() []byte
	// Changed signals that Bundle may return something new; every watched
	// configuration is then checked again.
	Changed <-chan struct{}
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics defaults to unregistered metrics.
	Metrics *Metrics
}

// BundlePatcher keeps the caBundle of this revision's webhook
// configurations (the injector, the revision tags that point at it, the
// validator) equal to BundleOptions.Bundle: when a configuration is created
// or edited, and when the bundle changes. Run it on one replica, the
// leader: replicas that disagree about the root during a rotation would
// otherwise put their own back in turn.
type BundlePatcher struct {
	opts    BundleOptions
	log     *slog.Logger
	metrics *Metrics

	// Set by Run.
	queue      workqueue.TypedRateLimitingInterface[configKey]
	mutating   admissionlisters.MutatingWebhookConfigurationLister
	validating admissionlisters.ValidatingWebhookConfigurationLister
}

// NewBundlePatcher checks the options and fills in defaults.
func NewBundlePatcher(opts BundleOptions) (*BundlePatcher, error) {
	switch {
	case opts.Client == nil:
		return nil, errors.New("webhook caBundle: Client is required")
	case opts.Namespace == "":
		return nil, errors.New("webhook caBundle: Namespace is required")
	case opts.Bundle == nil:
		return nil, errors.New("webhook caBundle: Bundle is required")
	}
	if opts.ValidatorName == "" {
		opts.ValidatorName = ValidatorConfigName(opts.Revision, opts.Namespace)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	return &BundlePatcher{opts: opts, log: opts.Logger.With("component", "webhook-cabundle"), metrics: opts.Metrics}, nil
}

// Run patches until ctx ends. Start it once Bundle returns the root, so
// that the first listing patches every configuration at once.
func (m *BundlePatcher) Run(ctx context.Context) error {
	stop, err := m.startPatcher(ctx)
	if err != nil {
		return err
	}
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-m.opts.Changed:
			m.log.Info("the CA root changed; patching it into the webhook configurations")
			m.enqueueAll()
		}
	}
}

// startPatcher watches this revision's webhook configurations (by label
// for the mutating ones, by name for the validator) and starts the worker
// that keeps their caBundle equal to Bundle. Call stop after ctx ends to
// wait for the worker and the informers.
func (m *BundlePatcher) startPatcher(ctx context.Context) (stop func(), err error) {
	revSelector := m.revisionSelector()
	mutFactory := informers.NewSharedInformerFactoryWithOptions(m.opts.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = revSelector.String() }))
	// One informer per validator name: a field selector names one object,
	// and name-restricted RBAC allows list and watch only that way.
	byName := func(name string) informers.SharedInformerFactory {
		return informers.NewSharedInformerFactoryWithOptions(m.opts.Client, 0,
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
			}))
	}
	valFactory, defaultValFactory := byName(m.opts.ValidatorName), byName(DefaultValidatorName)
	mutInformer := mutFactory.Admissionregistration().V1().MutatingWebhookConfigurations()
	valInformer := valFactory.Admissionregistration().V1().ValidatingWebhookConfigurations()
	defaultValInformer := defaultValFactory.Admissionregistration().V1().ValidatingWebhookConfigurations()

	m.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[configKey](),
		workqueue.TypedRateLimitingQueueConfig[configKey]{Name: "webhook-cabundle"})
	enqueue := func(kind configKind) func(obj any) {
		return func(obj any) {
			meta, ok := obj.(metav1.Object)
			if !ok {
				return
			}
			m.enqueueIfOurs(kind, meta)
		}
	}
	for _, w := range []struct {
		kind configKind
		inf  cache.SharedIndexInformer
	}{
		{mutatingKind, mutInformer.Informer()},
		{validatingKind, valInformer.Informer()},
		{validatingKind, defaultValInformer.Informer()},
	} {
		kind, inf := w.kind, w.inf
		add := enqueue(kind)
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    add,
			UpdateFunc: func(_, obj any) { add(obj) },
		}); err != nil {
			return nil, fmt.Errorf("webhook caBundle: watching %s: %w", kind, err)
		}
	}
	m.mutating = mutInformer.Lister()
	m.validating = validatingListers{valInformer.Lister(), defaultValInformer.Lister()}

	mutFactory.Start(ctx.Done())
	valFactory.Start(ctx.Done())
	defaultValFactory.Start(ctx.Done())
	var workers sync.WaitGroup
	workers.Go(func() {
		for m.processNext(ctx) {
		}
	})
	return func() {
		m.queue.ShutDown()
		workers.Wait()
		mutFactory.Shutdown()
		valFactory.Shutdown()
		defaultValFactory.Shutdown()
	}, nil
}

// validatingListers reads the validators from their per-name informers.
type validatingListers []admissionlisters.ValidatingWebhookConfigurationLister

func (l validatingListers) List(selector labels.Selector) ([]*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	var out []*admissionregistrationv1.ValidatingWebhookConfiguration
	for _, lister := range l {
		items, err := lister.List(selector)
		if err != nil {
			return nil, err
		}
		out = append(out, items...)
	}
	return out, nil
}

func (l validatingListers) Get(name string) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	for _, lister := range l {
		if c, err := lister.Get(name); err == nil || !apierrors.IsNotFound(err) {
			return c, err
		}
	}
	return nil, apierrors.NewNotFound(admissionregistrationv1.Resource("validatingwebhookconfigurations"), name)
}

// enqueueAll schedules every watched configuration, after the bundle
// changed.
func (m *BundlePatcher) enqueueAll() {
	if muts, err := m.mutating.List(labels.Everything()); err == nil {
		for _, c := range muts {
			m.enqueueIfOurs(mutatingKind, c)
		}
	}
	if vals, err := m.validating.List(labels.Everything()); err == nil {
		for _, c := range vals {
			m.enqueueIfOurs(validatingKind, c)
		}
	}
}

func (m *BundlePatcher) revisionSelector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{revisionLabel: RevisionLabelValue(m.opts.Revision)})
}

// enqueueIfOurs schedules a configuration of this revision. The informers'
// selectors filter already; checking again keeps a client that ignores
// selectors (such as a fake) from widening our reach.
func (m *BundlePatcher) enqueueIfOurs(kind configKind, meta metav1.Object) {
	switch kind {
	case mutatingKind:
		if !m.revisionSelector().Matches(labels.Set(meta.GetLabels())) {
			return
		}
	case validatingKind:
		ours := meta.GetName() == m.opts.ValidatorName ||
			(meta.GetName() == DefaultValidatorName && m.revisionSelector().Matches(labels.Set(meta.GetLabels())))
		if !ours {
			return
		}
	}
	m.queue.Add(configKey{kind: kind, name: meta.GetName()})
}

func (m *BundlePatcher) processNext(ctx context.Context) bool {
	key, shutdown := m.queue.Get()
	if shutdown {
		return false
	}
	defer m.queue.Done(key)
	if err := m.patchCABundle(ctx, key); err != nil {
		if ctx.Err() == nil {
			m.log.Warn("patching caBundle", "kind", key.kind, "name", key.name, "error", err)
		}
		m.queue.AddRateLimited(key)
		return true
	}
	m.queue.Forget(key)
	return true
}

// patchCABundle sets caBundle on every webhook of one configuration when
// any differs from ours.
func (m *BundlePatcher) patchCABundle(ctx context.Context, key configKey) error {
	bundle := m.opts.Bundle()
	if len(bundle) == 0 {
		return nil // no root yet; Changed re-queues everything once there is
	}
	current, err := m.webhookCABundles(key)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if allEqual(current, bundle) {
		return nil
	}
	// The control plane runs one patcher, on its leader. Should two ever
	// run (a term handing over), the updates carry resourceVersions: the
	// loser retries against the winner's object and, with the same root,
	// finds nothing to change.
	err = m.updateCABundle(ctx, key, bundle)
	result := "ok"
	switch {
	case apierrors.IsConflict(err):
		result = "conflict"
	case apierrors.IsNotFound(err):
		err, result = nil, "gone"
	case err != nil:
		result = "error"
	}
	m.metrics.CABundlePatches.WithLabelValues(string(key.kind), result).Inc()
	if err == nil && result == "ok" {
		m.log.Info("patched caBundle", "kind", key.kind, "name", key.name)
	}
	return err
}

func (m *BundlePatcher) webhookCABundles(key configKey) ([][]byte, error) {
	var out [][]byte
	switch key.kind {
	case mutatingKind:
		c, err := m.mutating.Get(key.name)
		if err != nil {
			return nil, err
		}
		for _, w := range c.Webhooks {
			out = append(out, w.ClientConfig.CABundle)
		}
	case validatingKind:
		c, err := m.validating.Get(key.name)
		if err != nil {
			return nil, err
		}
		for _, w := range c.Webhooks {
			out = append(out, w.ClientConfig.CABundle)
		}
	}
	return out, nil
}

// updateCABundle writes from the informer's copy, so the update carries
// its resourceVersion and fails with a conflict if the object moved on;
// the newer version then arrives as an event and is retried.
func (m *BundlePatcher) updateCABundle(ctx context.Context, key configKey, bundle []byte) error {
	api := m.opts.Client.AdmissionregistrationV1()
	switch key.kind {
	case mutatingKind:
		c, err := m.mutating.Get(key.name)
		if err != nil {
			return err
		}
		c = c.DeepCopy()
		for i := range c.Webhooks {
			c.Webhooks[i].ClientConfig.CABundle = bundle
		}
		_, err = api.MutatingWebhookConfigurations().Update(ctx, c, metav1.UpdateOptions{})
		return err
	case validatingKind:
		c, err := m.validating.Get(key.name)
		if err != nil {
			return err
		}
		c = c.DeepCopy()
		for i := range c.Webhooks {
			c.Webhooks[i].ClientConfig.CABundle = bundle
		}
		_, err = api.ValidatingWebhookConfigurations().Update(ctx, c, metav1.UpdateOptions{})
		return err
	}
	return nil
}

func allEqual(bundles [][]byte, want []byte) bool {
	for _, b := range bundles {
		if !bytes.Equal(b, want) {
			return false
		}
	}
	return true
}
