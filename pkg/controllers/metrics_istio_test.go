package controllers

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// The Kubernetes source counts informer events as istiod does: Services,
// EndpointSlices, Pods and Namespaces in pilot_k8s_reg_events under istiod's
// type names, config kinds in pilot_k8s_cfg_events, Secrets in neither;
// add, update and delete as they arrive. meshpilot_source_events_total
// still counts what was applied.
func TestKubeSourceCountsEventsUnderIstioNames(t *testing.T) {
	metrics := NewMetrics(prometheus.NewRegistry())
	src, err := NewKubeSource(KubeSourceOptions{Client: kubefake.NewClientset(), IstioClient: istiofake.NewSimpleClientset(),
		Store: model.NewStore(), Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	meta := func(name, rv string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: "default", ResourceVersion: rv}
	}
	svc := func(rv string) *corev1.Service {
		return &corev1.Service{ObjectMeta: meta("echo", rv), Spec: corev1.ServiceSpec{
			ClusterIP: "10.0.0.1", Ports: []corev1.ServicePort{{Name: "grpc", Port: 7070}}}}
	}
	services := src.handler("Service")
	services.OnAdd(svc("1"), false)
	services.OnUpdate(svc("1"), svc("2"))
	services.OnUpdate(svc("2"), svc("2")) // a resync: no event
	services.OnDelete(cache.DeletedFinalStateUnknown{Key: "default/echo", Obj: svc("2")})

	rule := &networkingv1.DestinationRule{ObjectMeta: meta("echo", "1")}
	rule.Spec.Host = "echo.default.svc.cluster.local"
	src.handler("DestinationRule").OnAdd(rule, false)

	secret := &corev1.Secret{ObjectMeta: meta("cert", "1"), Type: corev1.SecretTypeTLS}
	src.handler("Secret").OnAdd(secret, false)

	for _, tc := range []struct {
		vec         *prometheus.CounterVec
		labels      []string
		want        float64
		description string
	}{
		{metrics.IstioRegistryEvents, []string{"Services", "add"}, 1, "pilot_k8s_reg_events{type=Services,event=add}"},
		{metrics.IstioRegistryEvents, []string{"Services", "update"}, 1, "pilot_k8s_reg_events{type=Services,event=update}"},
		{metrics.IstioRegistryEvents, []string{"Services", "delete"}, 1, "pilot_k8s_reg_events{type=Services,event=delete}"},
		{metrics.IstioConfigEvents, []string{"DestinationRule", "add"}, 1, "pilot_k8s_cfg_events{type=DestinationRule,event=add}"},
		{metrics.Events, []string{KubeSourceName, "Service", "upsert"}, 2, "meshpilot_source_events_total{kind=Service,event=upsert}"},
		{metrics.Events, []string{KubeSourceName, "Service", "delete"}, 1, "meshpilot_source_events_total{kind=Service,event=delete}"},
		{metrics.Events, []string{KubeSourceName, "Secret", "upsert"}, 1, "meshpilot_source_events_total{kind=Secret,event=upsert}"},
	} {
		if got := counterValue(t, tc.vec.WithLabelValues(tc.labels...)); got != tc.want {
			t.Errorf("%s = %v, want %v", tc.description, got, tc.want)
		}
	}
	// Secrets count in neither of istiod's counters; each kind istiod
	// counts has its add, update and delete series.
	if got := seriesCount(metrics.IstioConfigEvents); got != 3 {
		t.Errorf("pilot_k8s_cfg_events has %d series, want DestinationRule's 3", got)
	}
	if got := seriesCount(metrics.IstioRegistryEvents); got != 3 {
		t.Errorf("pilot_k8s_reg_events has %d series, want Services' 3", got)
	}
}

func TestIstioEventTypesNameEveryWatchedKindButSecrets(t *testing.T) {
	kinds := []string{"Service", "EndpointSlice", "Pod", "Namespace", "Ingress", "IngressClass"}
	for _, k := range istioKinds {
		kinds = append(kinds, k.kind)
	}
	for _, kind := range kinds {
		if _, ok := istioEventTypes[kind]; !ok {
			t.Errorf("the Kubernetes source watches %s, which has no Istio event type", kind)
		}
	}
	if _, ok := istioEventTypes["Secret"]; ok {
		t.Error("istiod counts no Secret events")
	}
}
