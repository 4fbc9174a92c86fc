package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	istioinformers "istio.io/client-go/pkg/informers/externalversions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// discoveryCatchUp bounds how long a change of the CRD is followed by
// discovery checks: a new CRD is served a moment after it is created (once
// Established). A CRD that still serves no known version by then waits for
// its next change.
var discoveryCatchUp = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Steps: 8, Cap: 5 * time.Second}

// watchKindsOnceInstalled waits, for each kind at once, until its CRD is
// installed and then watches it (watchOnceInstalled). It returns when all
// of them are watched or ctx ends, or at the first error.
func (s *KubeSource) watchKindsOnceInstalled(ctx context.Context, factory istioinformers.SharedInformerFactory, kinds []istioKind) error {
	// Cancelling stops the waiting of the others after a failure; the
	// informers already started keep running until ctx itself ends.
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(kinds))
	for _, k := range kinds {
		wg.Go(func() {
			if err := s.watchOnceInstalled(waitCtx, ctx.Done(), factory, k); err != nil && waitCtx.Err() == nil {
				errs <- err
				cancel() // the others stop too: Run is failing
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs // nil when none failed
}

// watchOnceInstalled watches k's CRD (that one object, by name, so the
// permission can be that narrow) until discovery serves a version
// meshpilot reads, then starts that version's informer on factory, to run
// until stop closes. Istio watches CRDs the same way, so installing Istio's
// CRDs after the control plane needs no restart. It returns when the
// informer runs or ctx ends.
func (s *KubeSource) watchOnceInstalled(ctx context.Context, stop <-chan struct{}, factory istioinformers.SharedInformerFactory, k istioKind) error {
	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default: // a check is pending already
		}
	}
	crds := metadatainformer.NewFilteredSharedInformerFactory(s.opts.MetadataClient, 0, "", func(o *metav1.ListOptions) {
		o.FieldSelector = "metadata.name=" + k.crd()
	})
	defer crds.Shutdown()
	informer := crds.ForResource(crdResource).Informer()
	if err := informer.SetWatchErrorHandlerWithContext(s.watchErrorHandler("CustomResourceDefinition/" + k.crd())); err != nil {
		return fmt.Errorf("kubernetes source: watch the %s CRD: %w", k.kind, err)
	}
	// Established and served versions change by updates of the same object.
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(_, _ any) { notify() },
	}); err != nil {
		return fmt.Errorf("kubernetes source: watch the %s CRD: %w", k.kind, err)
	}
	crds.Start(ctx.Done())

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
		var version string
		// It ends without a version when the steps run out or ctx ends;
		// the loop waits for the next change or sees ctx end.
		_ = wait.ExponentialBackoffWithContext(ctx, discoveryCatchUp, func(ctx context.Context) (bool, error) {
			v, err := s.servedVersion(ctx, k)
			version = v
			return v != "", err
		})
		if version == "" {
			continue
		}
		if _, err := s.watch(k.kind, k.informer(factory, version)); err != nil {
			return err
		}
		factory.Start(stop)
		s.log.Info(fmt.Sprintf("the %s CRD is installed now; watching %ss", k.kind, k.kind), "version", version)
		return nil
	}
}
