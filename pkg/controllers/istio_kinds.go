package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	istioinformers "istio.io/client-go/pkg/informers/externalversions"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/cache"
)

// istioKind is an Istio CRD that the Kubernetes source watches. Each is
// optional: a cluster may lack its CRD, and may serve only older versions.
type istioKind struct {
	kind     string // as in metrics and logs, "DestinationRule"
	group    string
	resource string
	// versions are the served versions meshpilot can read, preferred first.
	versions []string
	informer func(f istioinformers.SharedInformerFactory, version string) cache.SharedIndexInformer
}

// crd is the CRD's metadata.name.
func (k istioKind) crd() string { return k.resource + "." + k.group }

var (
	destinationRules = istioKind{
		kind: "DestinationRule", group: "networking.istio.io", resource: "destinationrules",
		versions: []string{"v1", "v1beta1"},
		informer: func(f istioinformers.SharedInformerFactory, version string) cache.SharedIndexInformer {
			if version == "v1beta1" {
				return f.Networking().V1beta1().DestinationRules().Informer()
			}
			return f.Networking().V1().DestinationRules().Informer()
		},
	}
	peerAuthentications = istioKind{
		kind: "PeerAuthentication", group: "security.istio.io", resource: "peerauthentications",
		versions: []string{"v1", "v1beta1"},
		informer: func(f istioinformers.SharedInformerFactory, version string) cache.SharedIndexInformer {
			if version == "v1beta1" {
				return f.Security().V1beta1().PeerAuthentications().Informer()
			}
			return f.Security().V1().PeerAuthentications().Informer()
		},
	}
	virtualServices = istioKind{
		kind: "VirtualService", group: "networking.istio.io", resource: "virtualservices",
		versions: []string{"v1", "v1beta1"},
		informer: func(f istioinformers.SharedInformerFactory, version string) cache.SharedIndexInformer {
			if version == "v1beta1" {
				return f.Networking().V1beta1().VirtualServices().Informer()
			}
			return f.Networking().V1().VirtualServices().Informer()
		},
	}
	// istioKinds are watched in this order.
	istioKinds = []istioKind{destinationRules, peerAuthentications, virtualServices}
)

// istioKindVersion asks discovery which version of k to watch: the first
// of k.versions that is served, else "" when the CRD is not installed,
// which it reports. Transient discovery failures are retried until ctx ends.
func (s *KubeSource) istioKindVersion(ctx context.Context, k istioKind) (string, error) {
	version, err := s.servedVersion(ctx, k)
	if err != nil || version != "" {
		return version, err
	}
	s.metrics.CRDMissing.WithLabelValues(k.crd()).Inc()
	until := "meshpilot restarts with it installed"
	if s.opts.MetadataClient != nil {
		until = "it is installed; watching for it"
	}
	s.log.Warn(fmt.Sprintf("the %s CRD (%s) is not installed; %ss are ignored until %s", k.kind, k.crd(), k.kind, until),
		"servedVersionsTried", k.versions)
	return "", nil
}

// servedVersion is the preferred version of k that discovery serves, ""
// when none is.
func (s *KubeSource) servedVersion(ctx context.Context, k istioKind) (string, error) {
	disco := discovery.ToDiscoveryInterfaceWithContext(s.opts.Client.Discovery())
	for _, version := range k.versions {
		gv := k.group + "/" + version
		var served bool
		err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			list, err := disco.ServerResourcesForGroupVersionWithContext(ctx, gv)
			switch {
			case apierrors.IsNotFound(err):
				return true, nil
			case err != nil:
				s.log.Warn("discovery failed; retrying", "groupVersion", gv, "error", err)
				return false, nil
			}
			served = slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool {
				return r.Name == k.resource
			})
			return true, nil
		})
		if err != nil {
			return "", fmt.Errorf("kubernetes source: discovery of %s: %w", gv, err)
		}
		if served {
			return version, nil
		}
	}
	return "", nil
}
