package controllers

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apinetworking "istio.io/api/networking/v1"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// TestKubeSourceFallsBackToV1beta1 serves the DestinationRule CRD without
// v1, as older Istio releases did, and checks the source watches v1beta1.
func TestKubeSourceFallsBackToV1beta1(t *testing.T) {
	env := kubetest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopServingV1(t, ctx, env)

	ns := env.Namespace(t, "fallback")
	if _, err := env.Istio.NetworkingV1beta1().DestinationRules(ns).Create(ctx, &networkingv1beta1.DestinationRule{
		ObjectMeta: metav1.ObjectMeta{Name: "old"},
		Spec:       apinetworking.DestinationRule{Host: "reviews"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	store := model.NewStore()
	metrics := NewMetrics(prometheus.NewRegistry())
	src, err := NewKubeSource(KubeSourceOptions{Client: env.Kube, IstioClient: env.Istio, Store: store, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	eventually(t, "sync", src.HasSynced)
	eventually(t, "v1beta1 rule", func() bool { return drNames(store)["old"] != nil })
	if got := counterValue(t, metrics.CRDMissing.WithLabelValues("destinationrules.networking.istio.io")); got != 0 {
		t.Errorf("CRD reported missing %v times", got)
	}
}

// stopServingV1 makes v1beta1 the storage version and stops serving v1,
// then waits until discovery agrees.
func stopServingV1(t *testing.T, ctx context.Context, env *kubetest.Env) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	crd, err := crds.Get(ctx, "destinationrules.networking.istio.io", metav1.GetOptions{})
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
		_, err := env.Kube.Discovery().ServerResourcesForGroupVersion("networking.istio.io/v1")
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("discovery still serves networking.istio.io/v1 (last error %v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
