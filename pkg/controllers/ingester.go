package controllers

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	k8snetworkingv1 "k8s.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// IngesterOptions configures an Ingester.
type IngesterOptions struct {
	Store model.Store
	// DomainSuffix is the cluster DNS domain; DefaultDomainSuffix if empty.
	DomainSuffix string
}

// Ingester is the one place where Kubernetes objects become model objects.
// Sources hand it typed objects (Service, EndpointSlice, Pod, Namespace,
// Secret, Ingress and IngressClass of networking.k8s.io/v1, DestinationRule
// and VirtualService of networking.istio.io v1, v1beta1 or v1alpha3, and
// PeerAuthentication of security.istio.io v1 or v1beta1); it converts them
// and writes the store. It remembers Pods and EndpointSlices
// so that a Pod change re-converts the slices that point at it. It is safe
// for concurrent use; objects handed to it must not be mutated afterwards.
type Ingester struct {
	store        model.Store
	domainSuffix string

	mu sync.Mutex
	// workloads are the live Pods; endpoint conversion reads them.
	workloads map[model.NamespacedName]*model.Workload
	slices    map[model.NamespacedName]*ingestedSlice
	// podSlices indexes slices by the Pods their endpoints target, whether
	// or not the Pod has arrived yet.
	podSlices map[model.NamespacedName]map[model.NamespacedName]struct{}
}

type ingestedSlice struct {
	obj     *discoveryv1.EndpointSlice
	service model.NamespacedName
	hasSvc  bool
	pods    []model.NamespacedName
}

// NewIngester returns an Ingester writing to opts.Store.
func NewIngester(opts IngesterOptions) *Ingester {
	suffix := opts.DomainSuffix
	if suffix == "" {
		suffix = DefaultDomainSuffix
	}
	return &Ingester{
		store:        opts.Store,
		domainSuffix: suffix,
		workloads:    map[model.NamespacedName]*model.Workload{},
		slices:       map[model.NamespacedName]*ingestedSlice{},
		podSlices:    map[model.NamespacedName]map[model.NamespacedName]struct{}{},
	}
}

// Upsert applies an added or updated object. It returns an *ObjectError for
// an object it rejects; a rejected Istio config (DestinationRule,
// PeerAuthentication, VirtualService) also removes any earlier version of
// the same object from the store, as Istio does.
func (in *Ingester) Upsert(obj any) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	switch o := obj.(type) {
	case *corev1.Service:
		in.upsertService(ConvertService(o, in.domainSuffix))
	case *discoveryv1.EndpointSlice:
		in.upsertSlice(o)
	case *corev1.Pod:
		if podFinished(o) {
			in.deletePod(model.NamespacedName{Namespace: o.Namespace, Name: o.Name})
			return nil
		}
		in.upsertPod(ConvertPod(o))
	case *corev1.Namespace:
		in.store.UpsertNamespace(ConvertNamespace(o))
	case *corev1.Secret:
		in.upsertSecret(o)
	case *k8snetworkingv1.Ingress:
		in.upsertIngress(o)
	case *k8snetworkingv1.IngressClass:
		in.upsertIngressClass(o)
	default:
		kind, meta, spec, ok := istioConfigParts(obj)
		if !ok {
			return unknownKind(obj)
		}
		cfg, err := convertIstioConfig(meta, spec)
		if err != nil {
			in.store.DeleteConfig(model.ConfigKey{Kind: kind, Namespace: meta.Namespace, Name: meta.Name})
			return &ObjectError{
				Kind: kind.String(), Namespace: meta.Namespace, Name: meta.Name,
				Reason: ReasonInvalid, Document: -1, Err: err,
			}
		}
		in.store.UpsertConfig(cfg)
	}
	return nil
}

// Delete removes an object; only its kind, namespace and name matter.
func (in *Ingester) Delete(obj any) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	switch o := obj.(type) {
	case *corev1.Service:
		in.store.DeleteService(model.NamespacedName{Namespace: o.Namespace, Name: o.Name})
	case *discoveryv1.EndpointSlice:
		in.deleteSlice(model.NamespacedName{Namespace: o.Namespace, Name: o.Name})
	case *corev1.Pod:
		in.deletePod(model.NamespacedName{Namespace: o.Namespace, Name: o.Name})
	case *corev1.Namespace:
		in.store.DeleteNamespace(o.Name)
	case *corev1.Secret:
		in.store.DeleteSecret(model.NamespacedName{Namespace: o.Namespace, Name: o.Name})
	case *k8snetworkingv1.Ingress:
		in.store.DeleteIngress(model.NamespacedName{Namespace: o.Namespace, Name: o.Name})
	case *k8snetworkingv1.IngressClass:
		in.store.DeleteIngressClass(o.Name)
	default:
		kind, meta, _, ok := istioConfigParts(obj)
		if !ok {
			return unknownKind(obj)
		}
		in.store.DeleteConfig(model.ConfigKey{Kind: kind, Namespace: meta.Namespace, Name: meta.Name})
	}
	return nil
}

func unknownKind(obj any) error {
	return &ObjectError{Reason: ReasonUnknownKind, Document: -1, Err: fmt.Errorf("unsupported object type %T", obj)}
}

// The upserts below skip the store write when the conversion did not
// change, so that a resourceVersion bump for something meshpilot does not
// read (a label, a cert-manager annotation) pushes nothing.

func (in *Ingester) upsertService(svc *model.Service) {
	if old := in.store.Service(svc.Key()); old != nil && sameService(old, svc) {
		return
	}
	in.store.UpsertService(svc)
}

// upsertIngress stores a change of the status alone (mostly the status
// writer's own writes coming back) apart from the rest: the status writer
// must see it, but it changes nothing the gateway is sent.
func (in *Ingester) upsertIngress(obj *k8snetworkingv1.Ingress) {
	ing := ConvertIngress(obj)
	old := in.store.Ingress(ing.Key())
	switch {
	case old == nil || !sameIngress(old, ing):
		in.store.UpsertIngress(ing)
	case !slices.Equal(old.LoadBalancer, ing.LoadBalancer):
		in.store.SetIngressStatus(ing.Key(), ing.LoadBalancer)
	}
}

func (in *Ingester) upsertIngressClass(obj *k8snetworkingv1.IngressClass) {
	class := ConvertIngressClass(obj)
	for _, old := range in.store.IngressClasses() {
		if old.Name == class.Name && *old == *class {
			return
		}
	}
	in.store.UpsertIngressClass(class)
}

// upsertSecret stores a Secret holding any TLS key. One holding none (from
// a file, or whose keys were removed) cannot serve a certificate: it is
// dropped, as if deleted, so that an Ingress naming it is reported as
// missing its Secret.
func (in *Ingester) upsertSecret(obj *corev1.Secret) {
	sec, ok := ConvertSecret(obj)
	if !ok {
		in.store.DeleteSecret(sec.Key())
		return
	}
	if old := in.store.Secret(sec.Key()); old != nil && sameSecret(old, sec) {
		return
	}
	in.store.UpsertSecret(sec)
}

func (in *Ingester) lookupWorkload(key model.NamespacedName) *model.Workload {
	return in.workloads[key]
}

func (in *Ingester) upsertPod(w *model.Workload) {
	key := w.Key()
	old, had := in.workloads[key]
	if had && old.Equal(w) {
		return
	}
	in.workloads[key] = w
	in.store.UpsertWorkload(w)
	// Endpoints copy a few of the Pod's fields; a change of the others
	// (readiness, capture, canonical names) reaches node proxies alone.
	if !had || endpointFieldsChanged(old, w) {
		in.reconvertSlicesOf(key)
	}
}

// endpointFieldsChanged reports whether the endpoints that target a Pod
// must be converted again: ConvertEndpointSlice reads these fields of it.
func endpointFieldsChanged(old, w *model.Workload) bool {
	return old.ServiceAccount != w.ServiceAccount || old.Locality != w.Locality ||
		!maps.Equal(old.Labels, w.Labels)
}

func (in *Ingester) deletePod(key model.NamespacedName) {
	if _, ok := in.workloads[key]; !ok {
		return
	}
	delete(in.workloads, key)
	in.store.DeleteWorkload(key)
	in.reconvertSlicesOf(key)
}

// reconvertSlicesOf refreshes the endpoints of every slice that targets the
// Pod, so subset labels, service accounts and localities follow the Pod.
func (in *Ingester) reconvertSlicesOf(pod model.NamespacedName) {
	for sliceKey := range in.podSlices[pod] {
		if s := in.slices[sliceKey]; s != nil && s.hasSvc {
			in.store.SetEndpoints(s.service, s.obj.Name, ConvertEndpointSlice(s.obj, in.lookupWorkload))
		}
	}
}

func (in *Ingester) upsertSlice(slice *discoveryv1.EndpointSlice) {
	key := model.NamespacedName{Namespace: slice.Namespace, Name: slice.Name}
	svc, hasSvc := SliceService(slice)
	old := in.slices[key]
	if old != nil {
		in.unindexSlice(key, old.pods)
		if old.hasSvc && (!hasSvc || old.service != svc) {
			in.store.SetEndpoints(old.service, slice.Name, nil)
		}
	}
	s := &ingestedSlice{obj: slice, service: svc, hasSvc: hasSvc, pods: slicePods(slice)}
	in.slices[key] = s
	in.indexSlice(key, s.pods)
	if hasSvc {
		in.store.SetEndpoints(svc, slice.Name, ConvertEndpointSlice(slice, in.lookupWorkload))
	}
}

func (in *Ingester) deleteSlice(key model.NamespacedName) {
	old, ok := in.slices[key]
	if !ok {
		return
	}
	delete(in.slices, key)
	in.unindexSlice(key, old.pods)
	if old.hasSvc {
		in.store.SetEndpoints(old.service, key.Name, nil)
	}
}

// slicePods lists the Pods a slice's endpoints target, without repeats.
func slicePods(slice *discoveryv1.EndpointSlice) []model.NamespacedName {
	var out []model.NamespacedName
	seen := map[model.NamespacedName]bool{}
	for i := range slice.Endpoints {
		ref := slice.Endpoints[i].TargetRef
		if ref == nil || ref.Kind != "Pod" {
			continue
		}
		k := podKey(ref, slice.Namespace)
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

func (in *Ingester) indexSlice(slice model.NamespacedName, pods []model.NamespacedName) {
	for _, p := range pods {
		set := in.podSlices[p]
		if set == nil {
			set = map[model.NamespacedName]struct{}{}
			in.podSlices[p] = set
		}
		set[slice] = struct{}{}
	}
}

func (in *Ingester) unindexSlice(slice model.NamespacedName, pods []model.NamespacedName) {
	for _, p := range pods {
		set := in.podSlices[p]
		delete(set, slice)
		if len(set) == 0 {
			delete(in.podSlices, p)
		}
	}
}
