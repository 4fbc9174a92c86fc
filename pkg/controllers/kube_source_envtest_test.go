package controllers

import (
	"context"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	apinetworking "istio.io/api/networking/v1"
	"istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testlog"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// TestKubeSourceAgainstAPIServer drives every watched kind through a real
// API server and checks that the store converges after each change.
func TestKubeSourceAgainstAPIServer(t *testing.T) {
	t.Parallel()
	env := kubetest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	ns := env.Namespace(t, "controllers")
	kube, istio := env.Kube, env.Istio
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	svcKey := model.NamespacedName{Namespace: ns, Name: "reviews"}

	// Objects that exist before the source starts arrive in its initial list.
	must(kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "reviews"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 9080}, {Name: "grpc-api", Port: 7070}}},
	}, metav1.CreateOptions{}))

	store := model.NewStore()
	metrics := NewMetrics(prometheus.NewRegistry())
	logs := &testlog.Buffer{}
	src, err := NewKubeSource(KubeSourceOptions{Client: kube, IstioClient: istio, Store: store, Metrics: metrics,
		DomainSuffix: "cluster.local", Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runSynced(ctx, cancel, t, src, "sync")
	svc := store.Service(svcKey)
	if svc == nil || svc.Hostname != "reviews."+ns+".svc.cluster.local" || len(svc.ClusterIPs) != 1 ||
		len(svc.Ports) != 2 || svc.Ports[0].Protocol != model.ProtocolGRPC || svc.Ports[1].TargetPort != 9080 {
		t.Fatalf("service after sync = %+v", svc)
	}

	t.Run("service update and namespace labels", func(t *testing.T) {
		s, err := kube.CoreV1().Services(ns).Get(ctx, "reviews", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Annotations = map[string]string{annotationExportTo: "."}
		must(kube.CoreV1().Services(ns).Update(ctx, s, metav1.UpdateOptions{}))
		eventually(t, "exportTo", func() bool {
			s := store.Service(svcKey)
			return s != nil && len(s.ExportTo) == 1 && s.ExportTo[0] == ns
		})
		n, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Labels["istio-injection"] = "enabled"
		must(kube.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{}))
		eventually(t, "namespace labels", func() bool {
			for _, got := range store.Namespaces() {
				if got.Name == ns && got.Labels["istio-injection"] == "enabled" {
					return true
				}
			}
			return false
		})
	})

	createPod := func(t *testing.T, name, version, ip string) {
		t.Helper()
		pod, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "reviews", "version": version}},
			Spec: corev1.PodSpec{ServiceAccountName: "default", NodeName: "node-1",
				Containers: []corev1.Container{{Name: "app", Image: "example.com/app"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
		must(kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}))
	}
	createSlice := func(t *testing.T, name, pod, ip string) {
		t.Helper()
		must(kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "reviews"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](9080)}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ip}, Zone: ptr("zone-a"),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)},
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: pod, Namespace: ns}}},
		}, metav1.CreateOptions{}))
	}
	endpointVersion := func(address string) string {
		for _, e := range store.Endpoints(svcKey) {
			if e.Address == address {
				if e.Labels == nil {
					return "<no pod>"
				}
				return e.Labels["version"]
			}
		}
		return "<absent>"
	}

	t.Run("endpoints follow pods", func(t *testing.T) {
		createPod(t, "reviews-1", "v1", "10.244.1.5")
		createSlice(t, "reviews-a", "reviews-1", "10.244.1.5")
		eventually(t, "endpoint with pod labels", func() bool { return endpointVersion("10.244.1.5") == "v1" })
		e := store.Endpoints(svcKey)[0]
		if e.ServiceAccount != "default" || e.Locality.Zone != "zone-a" || e.Port != 9080 {
			t.Errorf("endpoint = %+v", e)
		}
		if ws := store.Workloads(); len(ws) != 1 || ws[0].IPs[0] != "10.244.1.5" {
			t.Errorf("workloads = %+v", ws)
		}

		pod, err := kube.CoreV1().Pods(ns).Get(ctx, "reviews-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Labels["version"] = "v2"
		must(kube.CoreV1().Pods(ns).Update(ctx, pod, metav1.UpdateOptions{}))
		eventually(t, "endpoint labels follow the pod", func() bool { return endpointVersion("10.244.1.5") == "v2" })

		// A slice that names a Pod before the Pod exists.
		createSlice(t, "reviews-b", "reviews-2", "10.244.1.6")
		eventually(t, "endpoint without pod", func() bool { return endpointVersion("10.244.1.6") == "<no pod>" })
		createPod(t, "reviews-2", "v3", "10.244.1.6")
		eventually(t, "late pod resolved", func() bool { return endpointVersion("10.244.1.6") == "v3" })

		// A finished Pod counts as deleted.
		pod, err = kube.CoreV1().Pods(ns).Get(ctx, "reviews-2", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Status.Phase = corev1.PodSucceeded
		must(kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}))
		eventually(t, "finished pod dropped", func() bool {
			return endpointVersion("10.244.1.6") == "<no pod>" && len(store.Workloads()) == 1
		})

		if err := kube.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "reviews-b", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// No kubelet confirms a graceful delete, so delete at once.
		if err := kube.CoreV1().Pods(ns).Delete(ctx, "reviews-1", metav1.DeleteOptions{GracePeriodSeconds: ptr[int64](0)}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "slice and pod deletes", func() bool {
			return endpointVersion("10.244.1.6") == "<absent>" && endpointVersion("10.244.1.5") == "<no pod>" &&
				len(store.Workloads()) == 0
		})
	})

	t.Run("destination rules", func(t *testing.T) {
		drs := istio.NetworkingV1().DestinationRules(ns)
		must(drs.Create(ctx, &networkingv1.DestinationRule{
			ObjectMeta: metav1.ObjectMeta{Name: "valid"},
			Spec: apinetworking.DestinationRule{Host: "reviews", Subsets: []*v1alpha3.Subset{
				{Name: "v1", Labels: map[string]string{"version": "v1"}}}},
		}, metav1.CreateOptions{}))
		// Accepted by the CRD schema, rejected by meshpilot: MUTUAL TLS
		// without any client certificate.
		must(drs.Create(ctx, &networkingv1.DestinationRule{
			ObjectMeta: metav1.ObjectMeta{Name: "invalid"},
			Spec: apinetworking.DestinationRule{Host: "ratings",
				TrafficPolicy: &v1alpha3.TrafficPolicy{Tls: &v1alpha3.ClientTLSSettings{Mode: v1alpha3.ClientTLSSettings_MUTUAL}}},
		}, metav1.CreateOptions{}))
		// Written through v1beta1, read through v1.
		must(istio.NetworkingV1beta1().DestinationRules(ns).Create(ctx, &networkingv1beta1.DestinationRule{
			ObjectMeta: metav1.ObjectMeta{Name: "beta"},
			Spec:       apinetworking.DestinationRule{Host: "details"},
		}, metav1.CreateOptions{}))
		rejected := func() float64 {
			return counterValue(t, metrics.ConfigErrors.WithLabelValues(KubeSourceName, "DestinationRule", ReasonInvalid))
		}
		eventually(t, "valid rules served, invalid rejected", func() bool {
			got := drNames(store)
			return len(got) == 2 && got["valid"] != nil && got["beta"] != nil && rejected() == 1
		})
		valid := drNames(store)["valid"]
		if valid.Revision == "" || valid.Generation != 1 || valid.CreationTime.IsZero() ||
			valid.Spec.(*apinetworking.DestinationRule).GetSubsets()[0].GetName() != "v1" {
			t.Errorf("converted rule = %+v", valid)
		}

		// An update that breaks a served rule withdraws it; others stay.
		cur, err := drs.Get(ctx, "valid", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.Host = "Not_A_Host"
		must(drs.Update(ctx, cur, metav1.UpdateOptions{}))
		eventually(t, "broken update withdraws the rule", func() bool {
			got := drNames(store)
			return len(got) == 1 && got["beta"] != nil && rejected() == 2
		})
		// Fixing the invalid one serves it.
		bad, err := drs.Get(ctx, "invalid", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		bad.Spec.TrafficPolicy.Tls.CredentialName = "ratings-client"
		must(drs.Update(ctx, bad, metav1.UpdateOptions{}))
		eventually(t, "fixed rule served", func() bool { return drNames(store)["invalid"] != nil })

		if err := drs.Delete(ctx, "beta", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "rule deleted", func() bool { return drNames(store)["beta"] == nil })
	})

	checkIngressKindsConverge(t, ctx, kube, store, ns)

	t.Run("service and namespace deletes", func(t *testing.T) {
		if err := kube.CoreV1().Services(ns).Delete(ctx, "reviews", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "service deleted", func() bool { return store.Service(svcKey) == nil })

		// Without a namespace controller, deletion needs the finalize step.
		gone := env.Namespace(t, "doomed")
		eventually(t, "namespace seen", func() bool { return hasNamespace(store, gone) })
		if err := kube.CoreV1().Namespaces().Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		n, err := kube.CoreV1().Namespaces().Get(ctx, gone, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Spec.Finalizers = nil
		must(kube.CoreV1().Namespaces().Finalize(ctx, n, metav1.UpdateOptions{}))
		eventually(t, "namespace deleted", func() bool { return !hasNamespace(store, gone) })
	})

	if got := counterValue(t, metrics.CRDMissing.WithLabelValues("destinationrules.networking.istio.io")); got != 0 {
		t.Errorf("CRD reported missing %v times", got)
	}
}

func drNames(store model.Store) map[string]*model.Config {
	out := map[string]*model.Config{}
	for _, c := range store.Configs(model.KindDestinationRule) {
		out[c.Name] = c
	}
	return out
}

func hasNamespace(store model.Store, name string) bool {
	for _, n := range store.Namespaces() {
		if n.Name == name {
			return true
		}
	}
	return false
}
