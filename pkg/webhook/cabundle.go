package webhook

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
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

// startPatcher watches this revision's webhook configurations (by label
// for the mutating ones, by name for the validator) and starts the worker
// that keeps their caBundle equal to CABundle. Call stop after ctx ends to
// wait for the worker and the informers.
func (m *CertManager) startPatcher(ctx context.Context) (stop func(), err error) {
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
			return nil, fmt.Errorf("webhook certs: watching %s: %w", kind, err)
		}
	}
	m.mutating = mutInformer.Lister()
	m.validating = validatingListers{valInformer.Lister(), defaultValInformer.Lister()}
	m.listersSet.Store(true)

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

// enqueueAll schedules every watched configuration, after the CA changed.
func (m *CertManager) enqueueAll() {
	if !m.listersSet.Load() {
		return // the informers' initial listing will enqueue them
	}
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

func (m *CertManager) revisionSelector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{revisionLabel: RevisionLabelValue(m.opts.Revision)})
}

// enqueueIfOurs schedules a configuration of this revision. The informers'
// selectors filter already; checking again keeps a client that ignores
// selectors (such as a fake) from widening our reach.
func (m *CertManager) enqueueIfOurs(kind configKind, meta metav1.Object) {
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

func (m *CertManager) processNext(ctx context.Context) bool {
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
func (m *CertManager) patchCABundle(ctx context.Context, key configKey) error {
	bundle := m.CABundle()
	if len(bundle) == 0 {
		return nil // not initialised; refresh enqueues everything once it is
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
	// Another replica may have rotated the CA; read the Secret before
	// overwriting its bundle with an older one.
	if err := m.refresh(ctx); err != nil {
		return err
	}
	if bundle = m.CABundle(); allEqual(current, bundle) {
		return nil
	}
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

func (m *CertManager) webhookCABundles(key configKey) ([][]byte, error) {
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
func (m *CertManager) updateCABundle(ctx context.Context, key configKey, bundle []byte) error {
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
