package controllers

import (
	"context"
	"fmt"
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

// watchDestinationRulesOnceInstalled watches the DestinationRule CRD (that
// one object, by name, so the permission can be that narrow) until
// discovery serves a version meshpilot reads, then starts that version's
// informer on factory. Istio watches CRDs the same way, so installing Istio's
// CRDs after the control plane needs no restart. It returns when the
// informer runs or ctx ends.
func (s *KubeSource) watchDestinationRulesOnceInstalled(ctx context.Context, factory istioinformers.SharedInformerFactory) error {
	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default: // a check is pending already
		}
	}
	crds := metadatainformer.NewFilteredSharedInformerFactory(s.opts.MetadataClient, 0, "", func(o *metav1.ListOptions) {
		o.FieldSelector = "metadata.name=" + destinationRuleCRD
	})
	defer crds.Shutdown()
	informer := crds.ForResource(crdResource).Informer()
	if err := informer.SetWatchErrorHandlerWithContext(s.watchErrorHandler("CustomResourceDefinition")); err != nil {
		return fmt.Errorf("kubernetes source: watch the DestinationRule CRD: %w", err)
	}
	// Established and served versions change by updates of the same object.
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(_, _ any) { notify() },
	}); err != nil {
		return fmt.Errorf("kubernetes source: watch the DestinationRule CRD: %w", err)
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
			v, err := s.servedDestinationRuleVersion(ctx)
			version = v
			return v != "", err
		})
		if version == "" {
			continue
		}
		if _, err := s.watch(destinationRuleKind, destinationRuleInformer(factory, version)); err != nil {
			return err
		}
		factory.Start(ctx.Done())
		s.log.Info("the DestinationRule CRD is installed now; watching DestinationRules", "version", version)
		return nil
	}
}
