package controllers

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apinetworking "istio.io/api/networking/v1"
	apisecurity "istio.io/api/security/v1beta1"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	securityv1beta1 "istio.io/client-go/pkg/apis/security/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// TestKubeSourceFallsBackToV1beta1 serves each Istio CRD without v1, as
// older Istio releases did, and checks the source watches v1beta1.
func TestKubeSourceFallsBackToV1beta1(t *testing.T) {
	t.Parallel()
	env := kubetest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, k := range istioKinds {
		stopServingV1(t, ctx, env, k)
	}

	ns := env.Namespace(t, "fallback")
	if _, err := env.Istio.NetworkingV1beta1().DestinationRules(ns).Create(ctx, &networkingv1beta1.DestinationRule{
		ObjectMeta: metav1.ObjectMeta{Name: "old"},
		Spec:       apinetworking.DestinationRule{Host: "reviews"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Istio.SecurityV1beta1().PeerAuthentications(ns).Create(ctx, &securityv1beta1.PeerAuthentication{
		ObjectMeta: metav1.ObjectMeta{Name: "old"},
		Spec: apisecurity.PeerAuthentication{Mtls: &apisecurity.PeerAuthentication_MutualTLS{
			Mode: apisecurity.PeerAuthentication_MutualTLS_STRICT}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Istio.NetworkingV1beta1().VirtualServices(ns).Create(ctx, &networkingv1beta1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{Name: "old"}, Spec: vsToSubset("reviews", "v1"),
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	store := model.NewStore()
	metrics := NewMetrics(prometheus.NewRegistry())
	src, err := NewKubeSource(KubeSourceOptions{Client: env.Kube, IstioClient: env.Istio, Store: store, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	runSynced(ctx, cancel, t, src, "sync")
	eventually(t, "v1beta1 rule", func() bool { return drNames(store)["old"] != nil })
	eventually(t, "v1beta1 policy", func() bool { return paNames(store)["old"] != nil })
	eventually(t, "v1beta1 VirtualService", func() bool { return vsNames(store)["old"] != nil })
	for _, k := range istioKinds {
		if got := counterValue(t, metrics.CRDMissing.WithLabelValues(k.crd())); got != 0 {
			t.Errorf("%s CRD reported missing %v times", k.kind, got)
		}
	}
}

// stopServingV1 makes v1beta1 the storage version of k's CRD and stops
// serving v1, then waits until discovery agrees.
func stopServingV1(t *testing.T, ctx context.Context, env *kubetest.Env, k istioKind) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	crd, err := crds.Get(ctx, k.crd(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	versions, _, err := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		v := v.(map[string]any)
		v["storage"] = v["name"] == "v1beta1"
		if v["name"] == "v1" {
			v["served"] = false
		}
	}
	if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	if _, err := crds.Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := env.Kube.Discovery().ServerResourcesForGroupVersion(k.group + "/v1")
		if apierrors.IsNotFound(err) || (err == nil && !slices.ContainsFunc(list.APIResources,
			func(r metav1.APIResource) bool { return r.Name == k.resource })) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("discovery still serves %s in %s/v1 (last error %v)", k.resource, k.group, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
