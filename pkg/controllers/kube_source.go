package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	istioinformers "istio.io/client-go/pkg/informers/externalversions"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// KubeSourceName is the Kubernetes source's Name and its metrics label.
const KubeSourceName = "kubernetes"

// tlsSecretSelector selects the Secrets the source watches.
const tlsSecretSelector = "type=" + string(corev1.SecretTypeTLS)

// KubeSourceOptions configures a KubeSource.
type KubeSourceOptions struct {
	Client      kubernetes.Interface
	IstioClient istioclient.Interface
	Store       model.Store
	// DomainSuffix is the cluster DNS domain; DefaultDomainSuffix if empty.
	DomainSuffix string
	Logger       *slog.Logger
	// Metrics may be shared with other sources; nil creates unregistered ones.
	Metrics *Metrics
	// Ingester, if set, is shared with other sources so that, for example,
	// a file's EndpointSlice resolves a Pod that Kubernetes reported. Store
	// and DomainSuffix are then taken from it. Nil makes a private one.
	Ingester *Ingester
	// ResyncPeriod re-delivers every cached object; 0 (the default) never.
	// Resyncs do not write the store: unchanged resourceVersions are skipped.
	ResyncPeriod time.Duration
	// MetadataClient watches for the Istio CRDs (DestinationRule,
	// PeerAuthentication, VirtualService) that are not installed at start, so that
	// installing one later takes effect without a restart (it needs list
	// and watch on those customresourcedefinitions, by name). Nil leaves a
	// missing CRD ignored until a restart.
	MetadataClient metadata.Interface
}

// KubeSource watches Services, EndpointSlices, Pods, Namespaces,
// Ingresses, IngressClasses, TLS Secrets, DestinationRules,
// PeerAuthentications and VirtualServices through informers and feeds them to the Ingester.
type KubeSource struct {
	opts     KubeSourceOptions
	log      *slog.Logger
	metrics  *Metrics
	ingester *Ingester
	synced   syncedSignal
	// failing holds, per kind, why its list or watch last failed; a kind
	// leaves it once an event for it arrives again.
	failing sync.Map // kind -> string
}

// NewKubeSource checks the options and returns a source; Run starts it.
func NewKubeSource(opts KubeSourceOptions) (*KubeSource, error) {
	switch {
	case opts.Client == nil:
		return nil, errors.New("kubernetes source: Client is required")
	case opts.IstioClient == nil:
		return nil, errors.New("kubernetes source: IstioClient is required")
	case opts.Store == nil && opts.Ingester == nil:
		return nil, errors.New("kubernetes source: Store or Ingester is required")
	}
	s := &KubeSource{
		opts:     opts,
		log:      cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)).With("source", KubeSourceName),
		metrics:  opts.Metrics,
		ingester: opts.Ingester,
	}
	if s.metrics == nil {
		s.metrics = NewMetrics(nil)
	}
	if s.ingester == nil {
		s.ingester = NewIngester(IngesterOptions{Store: opts.Store, DomainSuffix: opts.DomainSuffix})
	}
	return s, nil
}

// Name identifies the source in logs and metrics.
func (s *KubeSource) Name() string { return KubeSourceName }

// HasSynced reports whether every informer has listed and the ingester has
// applied the initial lists.
func (s *KubeSource) HasSynced() bool { return s.synced.isMarked() }

// Synced is closed once HasSynced would report true.
func (s *KubeSource) Synced() <-chan struct{} { return s.synced.done() }

// Run watches until ctx is done. It returns an error only if ctx ends
// before the informers sync.
func (s *KubeSource) Run(ctx context.Context) error {
	// Which version of each Istio kind to watch; "" while its CRD is missing.
	istioVersions := make([]string, len(istioKinds))
	for i, k := range istioKinds {
		v, err := s.istioKindVersion(ctx, k)
		if err != nil {
			return err
		}
		istioVersions[i] = v
	}
	kubeFactory := informers.NewSharedInformerFactoryWithOptions(s.opts.Client, s.opts.ResyncPeriod,
		informers.WithTransform(trimObject))
	defer kubeFactory.Shutdown()
	sizedListInformers(kubeFactory, s.opts.Client)
	istioFactory := istioinformers.NewSharedInformerFactoryWithOptions(s.opts.IstioClient, s.opts.ResyncPeriod,
		istioinformers.WithTransform(trimObject))
	defer istioFactory.Shutdown()
	// Only Secrets of type kubernetes.io/tls are listed and watched, not
	// every Secret of the cluster. Memory: Opaque, service-account,
	// docker-config and Helm release Secrets are numerous and large, and
	// would all sit in the cache. Least privilege: the contents of other
	// Secrets (passwords, tokens) never reach this process, and an
	// authorizer that understands field selectors can grant the list and
	// watch for this type alone. Istio's generic keys (cert/key/cacert) in
	// an Opaque Secret are therefore only read from files.
	secretFactory := informers.NewSharedInformerFactoryWithOptions(s.opts.Client, s.opts.ResyncPeriod,
		informers.WithTransform(trimObject),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = tlsSecretSelector }))
	defer secretFactory.Shutdown()

	informersByKind := map[string]cache.SharedIndexInformer{
		"Service":       kubeFactory.Core().V1().Services().Informer(),
		"EndpointSlice": kubeFactory.Discovery().V1().EndpointSlices().Informer(),
		"Pod":           kubeFactory.Core().V1().Pods().Informer(),
		"Namespace":     kubeFactory.Core().V1().Namespaces().Informer(),
		"Ingress":       kubeFactory.Networking().V1().Ingresses().Informer(),
		"IngressClass":  kubeFactory.Networking().V1().IngressClasses().Informer(),
		"Secret":        secretFactory.Core().V1().Secrets().Informer(),
	}
	var missing []istioKind
	logVersions := []any{}
	for i, k := range istioKinds {
		if istioVersions[i] == "" {
			missing = append(missing, k)
			continue
		}
		informersByKind[k.kind] = k.informer(istioFactory, istioVersions[i])
		logVersions = append(logVersions, k.kind, istioVersions[i])
	}
	var synced []cache.DoneChecker
	for _, kind := range slices.Sorted(maps.Keys(informersByKind)) {
		hasSynced, err := s.watch(kind, informersByKind[kind])
		if err != nil {
			return err
		}
		synced = append(synced, hasSynced)
	}
	kubeFactory.Start(ctx.Done())
	secretFactory.Start(ctx.Done())
	istioFactory.Start(ctx.Done())
	// WaitFor is told when each handler has had its initial list, where
	// WaitForCacheSync would look every 100 ms.
	if !cache.WaitFor(ctx, "", synced...) {
		return fmt.Errorf("kubernetes source: informers did not sync: %w", context.Cause(ctx))
	}
	s.failing.Clear()
	s.synced.mark()
	s.log.Info("kubernetes source synced", logVersions...)
	if s.opts.MetadataClient != nil {
		// Readiness never waits for these: a CRD may never come.
		if err := s.watchKindsOnceInstalled(ctx, istioFactory, missing); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return nil
}

// watch feeds an informer's events to the ingester and reports its list
// and watch failures; it returns what tells when the initial list is in.
func (s *KubeSource) watch(kind string, informer cache.SharedIndexInformer) (cache.DoneChecker, error) {
	if err := informer.SetWatchErrorHandlerWithContext(s.watchErrorHandler(kind)); err != nil {
		return nil, fmt.Errorf("kubernetes source: watch %s: %w", kind, err)
	}
	reg, err := informer.AddEventHandler(s.handler(kind))
	if err != nil {
		return nil, fmt.Errorf("kubernetes source: watch %s: %w", kind, err)
	}
	return reg.HasSyncedChecker(), nil
}

// watchErrorHandler reports failed lists and watches in our own log (client-go
// would only tell klog), so that a missing RBAC permission is named plainly
// while the source stays unsynced and readiness says why.
func (s *KubeSource) watchErrorHandler(kind string) cache.WatchErrorHandlerWithContext {
	return func(_ context.Context, _ *cache.Reflector, err error) {
		reason := "other"
		switch {
		case apierrors.IsForbidden(err):
			reason = "forbidden"
		case apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || errors.Is(err, io.EOF):
			// Routine: the reflector relists or rewatches by itself.
			s.metrics.WatchErrors.WithLabelValues(kind, "expired").Inc()
			return
		}
		s.metrics.WatchErrors.WithLabelValues(kind, reason).Inc()
		problem := fmt.Sprintf("%s: %v", kind, err)
		if previous, loaded := s.failing.Swap(kind, problem); !loaded || previous != problem {
			if reason == "forbidden" {
				s.log.Error("permission denied: cannot list or watch "+kind+"; "+
					"grant list and watch on it to the control plane's service account", "kind", kind, "error", err)
			} else {
				s.log.Warn("list or watch failed; retrying", "kind", kind, "error", err)
			}
		}
	}
}

// SyncProblem says why the source is not synced, if a list or watch failed.
func (s *KubeSource) SyncProblem() string {
	var problems []string
	s.failing.Range(func(_, v any) bool {
		problems = append(problems, v.(string))
		return true
	})
	slices.Sort(problems)
	return strings.Join(problems, "; ")
}

func (s *KubeSource) handler(kind string) cache.ResourceEventHandler {
	events := s.metrics.kubeEvents(kind)
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			received(events.istioAdds)
			s.apply(kind, events.upserts, obj, s.ingester.Upsert)
		},
		UpdateFunc: func(oldObj, newObj any) {
			if sameResourceVersion(oldObj, newObj) {
				return // a resync, not a change
			}
			received(events.istioUpdates)
			s.apply(kind, events.upserts, newObj, s.ingester.Upsert)
		},
		DeleteFunc: func(obj any) {
			received(events.istioDeletes)
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			s.apply(kind, events.deletes, obj, s.ingester.Delete)
		},
	}
}

// apply applies one event to the store; applied counts it if it succeeds.
func (s *KubeSource) apply(kind string, applied prometheus.Counter, obj any, op func(any) error) {
	s.failing.Delete(kind)
	err := op(obj)
	if err == nil {
		applied.Inc()
		return
	}
	var objErr *ObjectError
	if !errors.As(err, &objErr) {
		objErr = &ObjectError{Reason: ReasonInvalid, Document: -1, Err: err}
	}
	objErr.Kind = kind
	if accessor, ok := obj.(metav1.ObjectMetaAccessor); ok {
		objErr.Namespace, objErr.Name = accessor.GetObjectMeta().GetNamespace(), accessor.GetObjectMeta().GetName()
	}
	report(s.log, s.metrics, KubeSourceName, objErr)
}

func sameResourceVersion(a, b any) bool {
	am, ok1 := a.(metav1.ObjectMetaAccessor)
	bm, ok2 := b.(metav1.ObjectMetaAccessor)
	if !ok1 || !ok2 {
		return false
	}
	rv := am.GetObjectMeta().GetResourceVersion()
	return rv != "" && rv == bm.GetObjectMeta().GetResourceVersion()
}
