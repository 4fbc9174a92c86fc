package ca

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

const (
	// RootCertConfigMap is the ConfigMap istiod writes into every namespace
	// so that workloads (the sidecar agent, ztunnel, proxyless gRPC) can
	// trust the CA before they hold a certificate.
	RootCertConfigMap = "istio-ca-root-cert"
	// configLabel marks the ConfigMap as istiod marks it, so tools that
	// select Istio's own objects by it find ours too.
	configLabel = "istio.io/config"
)

// RootCertPublisher keeps the ConfigMap istio-ca-root-cert, with the key
// root-cert.pem holding the CA's root, in every namespace: it writes it
// when a namespace appears, and puts it back when someone edits or deletes
// it. It writes only when the content differs. Run one per cluster: the
// control plane runs it on the elected leader only, as istiod runs its
// namespace controller, because two replicas holding different roots
// (while a rotation reaches them) would rewrite each other's ConfigMaps.
// SetRoot replaces the root it publishes, after the CA reloaded its root.
type RootCertPublisher struct {
	kube        kubernetes.Interface
	rootPEM     atomic.Pointer[string]
	rootChanged chan struct{}
	log         *slog.Logger

	namespaces corelisters.NamespaceLister
	configMaps corelisters.ConfigMapLister
	synced     []cache.DoneChecker
	queue      workqueue.TypedRateLimitingInterface[string]
}

// NewRootCertPublisher needs a client that may get, list and watch
// namespaces, and create, update, get, list and watch configmaps in all
// namespaces.
func NewRootCertPublisher(kube kubernetes.Interface, rootPEM []byte, logger *slog.Logger) *RootCertPublisher {
	if logger == nil {
		logger = slog.Default()
	}
	p := &RootCertPublisher{kube: kube, rootChanged: make(chan struct{}, 1), log: logger.With("configmap", RootCertConfigMap)}
	root := string(rootPEM)
	p.rootPEM.Store(&root)
	return p
}

// SetRoot makes rootPEM the root to publish, and has Run rewrite every
// namespace's ConfigMap that holds another.
func (p *RootCertPublisher) SetRoot(rootPEM []byte) {
	root := string(rootPEM)
	if *p.rootPEM.Swap(&root) == root {
		return
	}
	select {
	case p.rootChanged <- struct{}{}:
	default: // Run has not taken the previous change yet; it will see this root
	}
}

// HasSynced reports whether both informers have listed once, i.e. every
// namespace existing at start has been queued.
func (p *RootCertPublisher) HasSynced() bool {
	for _, s := range p.synced {
		if !cache.IsDone(s) {
			return false
		}
	}
	return len(p.synced) > 0
}

// Run publishes until ctx ends.
func (p *RootCertPublisher) Run(ctx context.Context) error {
	nsFactory := informers.NewSharedInformerFactory(p.kube, 0)
	// Only our ConfigMap, by a field selector: a cluster has thousands of
	// ConfigMaps and we must not cache them all.
	cmFactory := informers.NewSharedInformerFactoryWithOptions(p.kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", RootCertConfigMap).String()
		}))
	nsInformer := nsFactory.Core().V1().Namespaces()
	cmInformer := cmFactory.Core().V1().ConfigMaps()

	p.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "ca-root-cert"})
	enqueueNamespace := func(obj any) {
		if ns, ok := obj.(*corev1.Namespace); ok {
			p.queue.Add(ns.Name)
		}
	}
	// A deleted ConfigMap arrives either as itself or, after a missed watch
	// event, as a tombstone; both name the namespace to repair.
	enqueueOwner := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == RootCertConfigMap {
			p.queue.Add(cm.Namespace)
		}
	}
	if _, err := nsInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueueNamespace,
		// A namespace that leaves Terminating does not exist any more; a
		// label change needs nothing. Updates matter only after a failed
		// create, which the rate-limited retry covers, so they are ignored.
	}); err != nil {
		return fmt.Errorf("root cert publisher: watching namespaces: %w", err)
	}
	if _, err := cmInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		// Add too: a ConfigMap someone else created first (our Create then
		// meets AlreadyExists) must be checked like an edited one.
		AddFunc:    enqueueOwner,
		UpdateFunc: func(_, obj any) { enqueueOwner(obj) },
		DeleteFunc: enqueueOwner,
	}); err != nil {
		return fmt.Errorf("root cert publisher: watching configmaps: %w", err)
	}
	p.namespaces = nsInformer.Lister()
	p.configMaps = cmInformer.Lister()
	p.synced = []cache.DoneChecker{nsInformer.Informer().HasSyncedChecker(), cmInformer.Informer().HasSyncedChecker()}

	nsFactory.Start(ctx.Done())
	cmFactory.Start(ctx.Done())
	defer func() {
		p.queue.ShutDown()
		nsFactory.Shutdown()
		cmFactory.Shutdown()
	}()
	// The workers read the ConfigMap lister; before it has listed, every
	// ConfigMap would look missing and every Create would fail.
	if !cache.WaitFor(ctx, "", p.synced...) {
		return nil // ctx ended
	}
	p.log.Info("publishing the CA root into every namespace")
	var workers sync.WaitGroup
	for range 2 {
		workers.Go(func() {
			for p.processNext(ctx) {
			}
		})
	}
	for {
		select {
		case <-ctx.Done():
			p.queue.ShutDown()
			workers.Wait()
			return nil
		case <-p.rootChanged:
			p.enqueueAllNamespaces()
		}
	}
}

// enqueueAllNamespaces queues every known namespace, after the root changed.
func (p *RootCertPublisher) enqueueAllNamespaces() {
	namespaces, err := p.namespaces.List(labels.Everything())
	if err != nil { // a cache lister does not fail; be safe anyway
		p.log.Error("cannot list namespaces to publish the new root", "error", err)
		return
	}
	p.log.Info("publishing a new CA root into every namespace", "namespaces", len(namespaces))
	for _, ns := range namespaces {
		p.queue.Add(ns.Name)
	}
}

func (p *RootCertPublisher) processNext(ctx context.Context) bool {
	ns, shutdown := p.queue.Get()
	if shutdown {
		return false
	}
	defer p.queue.Done(ns)
	if err := p.sync(ctx, ns); err != nil {
		if ctx.Err() == nil {
			p.log.Warn("root certificate not published; retrying", "namespace", ns, "error", err)
		}
		p.queue.AddRateLimited(ns)
		return true
	}
	p.queue.Forget(ns)
	return true
}

// sync makes namespace's ConfigMap hold the root, writing only on a
// difference.
func (p *RootCertPublisher) sync(ctx context.Context, namespace string) error {
	ns, err := p.namespaces.Get(namespace)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	// The API server refuses new objects in a terminating namespace.
	if ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating {
		return nil
	}
	cms := p.kube.CoreV1().ConfigMaps(namespace)
	current, err := p.configMaps.ConfigMaps(namespace).Get(RootCertConfigMap)
	switch {
	case apierrors.IsNotFound(err):
		_, err := cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: RootCertConfigMap, Namespace: namespace,
				Labels: map[string]string{configLabel: "true"}},
			Data: map[string]string{RootCertKey: *p.rootPEM.Load()},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// Another replica, or our informer is behind: the update
			// event that follows re-queues it if it is wrong.
			return nil
		}
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			// The namespace informer has not seen the deletion yet; the
			// namespace is going, and a retry would be refused again.
			return nil
		}
		if err == nil {
			p.log.Info("root certificate published", "namespace", namespace)
		}
		return err
	case err != nil:
		return err
	}
	rootPEM := *p.rootPEM.Load()
	if current.Data[RootCertKey] == rootPEM {
		return nil
	}
	next := current.DeepCopy()
	if next.Data == nil {
		next.Data = map[string]string{}
	}
	next.Data[RootCertKey] = rootPEM
	if next.Labels == nil {
		next.Labels = map[string]string{}
	}
	next.Labels[configLabel] = "true"
	// The update carries the resourceVersion we read, so it never
	// overwrites a newer version unseen: a conflict is retried after the
	// backoff, against the informer's fresher copy.
	if _, err = cms.Update(ctx, next, metav1.UpdateOptions{}); err == nil {
		p.log.Info("root certificate repaired", "namespace", namespace)
	}
	return err
}
