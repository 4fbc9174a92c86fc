package controllers

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/testing/protocmp"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istiofake "istio.io/client-go/pkg/clientset/versioned/fake"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	k8snetworkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	fakediscovery "k8s.io/client-go/discovery/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/meshpilot/meshpilot/pkg/model"
)

var cmpProto = protocmp.Transform()

func TestIstioKindVersion(t *testing.T) {
	list := func(gv string, resources ...string) *metav1.APIResourceList {
		l := &metav1.APIResourceList{GroupVersion: gv}
		for _, r := range resources {
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: r})
		}
		return l
	}
	cases := []struct {
		name        string
		kind        istioKind
		served      []*metav1.APIResourceList
		want        string
		wantMissing float64
	}{
		{name: "DestinationRule v1 served", kind: destinationRules, want: "v1",
			served: []*metav1.APIResourceList{list("networking.istio.io/v1", "destinationrules"), list("networking.istio.io/v1beta1", "destinationrules")}},
		{name: "DestinationRule only v1beta1", kind: destinationRules, want: "v1beta1",
			served: []*metav1.APIResourceList{list("networking.istio.io/v1beta1", "destinationrules")}},
		{name: "group served without DestinationRules", kind: destinationRules, want: "", wantMissing: 1,
			served: []*metav1.APIResourceList{list("networking.istio.io/v1", "virtualservices")}},
		{name: "DestinationRule CRD absent", kind: destinationRules, want: "", wantMissing: 1},
		{name: "PeerAuthentication v1 served", kind: peerAuthentications, want: "v1",
			served: []*metav1.APIResourceList{list("security.istio.io/v1", "peerauthentications", "authorizationpolicies"), list("security.istio.io/v1beta1", "peerauthentications")}},
		{name: "PeerAuthentication only v1beta1", kind: peerAuthentications, want: "v1beta1",
			served: []*metav1.APIResourceList{list("security.istio.io/v1beta1", "peerauthentications")}},
		{name: "security group served without PeerAuthentications", kind: peerAuthentications, want: "", wantMissing: 1,
			served: []*metav1.APIResourceList{list("security.istio.io/v1", "authorizationpolicies")}},
		{name: "PeerAuthentication in another group does not count", kind: peerAuthentications, want: "", wantMissing: 1,
			served: []*metav1.APIResourceList{list("networking.istio.io/v1", "peerauthentications")}},
		{name: "PeerAuthentication CRD absent", kind: peerAuthentications, want: "", wantMissing: 1},
		{name: "VirtualService v1 served", kind: virtualServices, want: "v1",
			served: []*metav1.APIResourceList{list("networking.istio.io/v1", "destinationrules", "virtualservices"), list("networking.istio.io/v1beta1", "virtualservices")}},
		{name: "VirtualService only v1beta1", kind: virtualServices, want: "v1beta1",
			served: []*metav1.APIResourceList{list("networking.istio.io/v1", "destinationrules"), list("networking.istio.io/v1beta1", "virtualservices")}},
		{name: "VirtualService CRD absent", kind: virtualServices, want: "", wantMissing: 1,
			served: []*metav1.APIResourceList{list("networking.istio.io/v1", "destinationrules")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := kubefake.NewClientset()
			client.Discovery().(*fakediscovery.FakeDiscovery).Resources = tc.served
			metrics := NewMetrics(prometheus.NewRegistry())
			src, err := NewKubeSource(KubeSourceOptions{Client: client, IstioClient: istiofake.NewSimpleClientset(),
				Store: model.NewStore(), Metrics: metrics})
			if err != nil {
				t.Fatal(err)
			}
			got, err := src.istioKindVersion(context.Background(), tc.kind)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("version = %q, want %q", got, tc.want)
			}
			missing := counterValue(t, metrics.CRDMissing.WithLabelValues(tc.kind.crd()))
			if missing != tc.wantMissing {
				t.Errorf("missing CRD count = %v, want %v", missing, tc.wantMissing)
			}
		})
	}
}

func TestTrimObject(t *testing.T) {
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Name: "x", Namespace: "ns", Labels: map[string]string{"app": "x"},
			Annotations:   map[string]string{annotationLastApplied: "{...}", "keep": "me"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		}
	}
	wantMeta := metav1.ObjectMeta{Name: "x", Namespace: "ns", Labels: map[string]string{"app": "x"},
		Annotations: map[string]string{"keep": "me"}}
	pod := &corev1.Pod{
		ObjectMeta: meta(),
		Spec: corev1.PodSpec{ServiceAccountName: "sa", NodeName: "n1", HostNetwork: true,
			Containers: []corev1.Container{
				{Name: "app", Image: "big", Env: []corev1.EnvVar{{Name: "A", Value: "B"}},
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, HostPort: 80}, {ContainerPort: 9000}}},
				{Name: "portless", Image: "big"},
			},
			InitContainers: []corev1.Container{
				{Name: "setup", Ports: []corev1.ContainerPort{{Name: "x", ContainerPort: 1}}},
				{Name: "sidecar", RestartPolicy: ptr(corev1.ContainerRestartPolicyAlways),
					Ports: []corev1.ContainerPort{{Name: "admin", ContainerPort: 15000}}},
			}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.5", PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, Reason: "r", Message: "m"}}},
	}
	onlyLastApplied := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s",
		Annotations: map[string]string{annotationLastApplied: "{}"}}}
	cases := []struct {
		name string
		in   runtime.Object
		want runtime.Object
	}{
		{
			name: "pod keeps only what is read",
			in:   pod,
			want: &corev1.Pod{ObjectMeta: wantMeta, Spec: corev1.PodSpec{ServiceAccountName: "sa", NodeName: "n1", HostNetwork: true,
				Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}},
				InitContainers: []corev1.Container{{Name: "sidecar", RestartPolicy: ptr(corev1.ContainerRestartPolicyAlways),
					Ports: []corev1.ContainerPort{{Name: "admin", ContainerPort: 15000}}}}},
				Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.5", PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}},
					Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}},
		},
		{
			name: "service metadata",
			in:   &corev1.Service{ObjectMeta: meta(), Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.1"}},
			want: &corev1.Service{ObjectMeta: wantMeta, Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.1"}},
		},
		{
			name: "destination rule metadata",
			in:   &networkingv1.DestinationRule{ObjectMeta: meta()},
			want: &networkingv1.DestinationRule{ObjectMeta: wantMeta},
		},
		{
			name: "secret keeps only the tls data keys",
			in: &corev1.Secret{ObjectMeta: func() metav1.ObjectMeta {
				m := meta()
				m.ResourceVersion, m.UID = "9", "u1"
				return m
			}(), Type: corev1.SecretTypeTLS, Data: map[string][]byte{
				"tls.crt": []byte("C"), "tls.key": []byte("K"), "ca.crt": []byte("A"),
				"cert": []byte("C2"), "key": []byte("K2"), "cacert": []byte("A2"), "password": []byte("p"),
			}, StringData: map[string]string{"x": "y"}},
			want: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns", ResourceVersion: "9", UID: "u1"},
				Type: corev1.SecretTypeTLS, Data: map[string][]byte{
					"tls.crt": []byte("C"), "tls.key": []byte("K"), "ca.crt": []byte("A"),
					"cert": []byte("C2"), "key": []byte("K2"), "cacert": []byte("A2"),
				}},
		},
		{
			name: "secret without tls keys keeps no data",
			in:   &corev1.Secret{ObjectMeta: meta(), Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"password": []byte("p")}},
			want: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns"}, Type: corev1.SecretTypeOpaque},
		},
		{
			name: "ingress keeps spec, status and the class annotation",
			in: &k8snetworkingv1.Ingress{ObjectMeta: func() metav1.ObjectMeta {
				m := meta()
				m.Annotations[annotationIngressClass] = "istio"
				return m
			}(), Spec: k8snetworkingv1.IngressSpec{IngressClassName: ptr("istio")},
				Status: k8snetworkingv1.IngressStatus{LoadBalancer: k8snetworkingv1.IngressLoadBalancerStatus{
					Ingress: []k8snetworkingv1.IngressLoadBalancerIngress{{IP: "203.0.113.7"}}}}},
			want: &k8snetworkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns",
				Labels: map[string]string{"app": "x"}, Annotations: map[string]string{"keep": "me", annotationIngressClass: "istio"}},
				Spec: k8snetworkingv1.IngressSpec{IngressClassName: ptr("istio")},
				Status: k8snetworkingv1.IngressStatus{LoadBalancer: k8snetworkingv1.IngressLoadBalancerStatus{
					Ingress: []k8snetworkingv1.IngressLoadBalancerIngress{{IP: "203.0.113.7"}}}}},
		},
		{
			name: "ingress class metadata",
			in:   &k8snetworkingv1.IngressClass{ObjectMeta: meta(), Spec: k8snetworkingv1.IngressClassSpec{Controller: model.IngressController}},
			want: &k8snetworkingv1.IngressClass{ObjectMeta: wantMeta, Spec: k8snetworkingv1.IngressClassSpec{Controller: model.IngressController}},
		},
		{
			name: "endpoint slice keeps what conversion reads",
			in: &discoveryv1.EndpointSlice{ObjectMeta: meta(), AddressType: discoveryv1.AddressTypeIPv4,
				Ports: []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}},
				Endpoints: append(make([]discoveryv1.Endpoint, 0, 8), discoveryv1.Endpoint{
					Addresses:  []string{"10.244.1.5"},
					Conditions: discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)},
					Hostname:   ptr("h"), NodeName: ptr("n1"), Zone: ptr("z1"),
					TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p1", UID: "u1",
						ResourceVersion: "7", APIVersion: "v1"},
					Hints: &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z1"}}},
				}, discoveryv1.Endpoint{Addresses: []string{"10.244.1.6"}})},
			want: &discoveryv1.EndpointSlice{ObjectMeta: wantMeta, AddressType: discoveryv1.AddressTypeIPv4,
				Ports: []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}},
				Endpoints: []discoveryv1.Endpoint{{
					Addresses:  []string{"10.244.1.5"},
					Conditions: discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)},
					Zone:       ptr("z1"),
					TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p1"},
				}, {Addresses: []string{"10.244.1.6"}}}},
		},
		{
			name: "annotations emptied",
			in:   onlyLastApplied,
			want: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := trimObject(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpProto); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
			again, _ := trimObject(got)
			if diff := cmp.Diff(got, again, cmpProto); diff != "" {
				t.Errorf("not idempotent (-once +twice)\n%s", diff)
			}
		})
	}
}

// TestTrimEndpointSliceMemory checks what the slice trim is for, beyond
// what it keeps: the endpoints take no more room than they need, and equal
// conditions of different slices share their values.
func TestTrimEndpointSliceMemory(t *testing.T) {
	slice := func() *discoveryv1.EndpointSlice {
		eps := make([]discoveryv1.Endpoint, 0, 16)
		for range 10 {
			eps = append(eps, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}})
		}
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}, Endpoints: eps}
	}
	a, _ := trimObject(slice())
	b, _ := trimObject(slice())
	aEps, bEps := a.(*discoveryv1.EndpointSlice).Endpoints, b.(*discoveryv1.EndpointSlice).Endpoints
	if len(aEps) != 10 || cap(aEps) != 10 {
		t.Errorf("trimmed endpoints: len %d cap %d, want 10 and 10", len(aEps), cap(aEps))
	}
	if aEps[0].Conditions.Ready != bEps[9].Conditions.Ready {
		t.Error("equal ready conditions of two slices point at different values")
	}
}

// TestKubeSourceWithFakeClients runs the source's wiring against fake
// clients, with the Istio CRDs absent: the source must still sync.
// (The istio fake clientset cannot serve client-go's watch-list streams;
// the envtest test covers DestinationRules against a real API server.)
func TestKubeSourceWithFakeClients(t *testing.T) {
	client := kubefake.NewClientset(
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "ns"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}},
	)
	// The fake's watches do not resume from a resource version: a delete
	// made after the informer's list but before its watch is lost. The
	// reactor opens the watch itself and says when it has.
	serviceWatch := make(chan struct{})
	var watchOnce sync.Once
	client.PrependWatchReactor("services", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := client.Tracker().Watch(a.GetResource(), a.GetNamespace())
		watchOnce.Do(func() { close(serviceWatch) })
		return true, w, err
	})
	istio := istiofake.NewSimpleClientset()
	store := model.NewStore()
	metrics := NewMetrics(prometheus.NewRegistry())
	src, err := NewKubeSource(KubeSourceOptions{Client: client, IstioClient: istio, Store: store, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	if src.Name() != "kubernetes" {
		t.Errorf("Name() = %q", src.Name())
	}
	ctx, cancel := context.WithCancel(context.Background())
	runSynced(ctx, cancel, t, src, "sync")
	// HasSynced means the initial lists are in the store already.
	if store.Service(reviews) == nil || len(store.Namespaces()) != 1 {
		t.Fatalf("initial list missing: services=%v namespaces=%v", store.Services(), store.Namespaces())
	}
	for _, crd := range []string{"destinationrules.networking.istio.io", "peerauthentications.security.istio.io"} {
		if got := counterValue(t, metrics.CRDMissing.WithLabelValues(crd)); got != 1 {
			t.Errorf("missing CRD %s not counted: %v", crd, got)
		}
	}
	select {
	case <-serviceWatch:
	case <-time.After(20 * time.Second):
		t.Fatal("the Service informer never watched")
	}
	if err := client.CoreV1().Services("ns").Delete(ctx, "reviews", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "service deleted", func() bool { return store.Service(reviews) == nil })
}

func TestKubeSourceOptions(t *testing.T) {
	for name, opts := range map[string]KubeSourceOptions{
		"no client":       {IstioClient: istiofake.NewSimpleClientset(), Store: model.NewStore()},
		"no istio client": {Client: kubefake.NewClientset(), Store: model.NewStore()},
		"no store":        {Client: kubefake.NewClientset(), IstioClient: istiofake.NewSimpleClientset()},
	} {
		if _, err := NewKubeSource(opts); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestKubeSourceRunEndsWithContextBeforeSync(t *testing.T) {
	src, err := NewKubeSource(KubeSourceOptions{Client: kubefake.NewClientset(), IstioClient: istiofake.NewSimpleClientset(),
		Store: model.NewStore()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	if err := src.Run(ctx); err == nil {
		t.Fatal("Run with a dead context reported success")
	}
	if src.HasSynced() {
		t.Fatal("synced without running")
	}
}

func TestKubeHandlerSkipsResync(t *testing.T) {
	store := model.NewStore()
	writes := 0
	store.OnChange(func(model.ConfigKey) { writes++ })
	src, err := NewKubeSource(KubeSourceOptions{Client: kubefake.NewClientset(), IstioClient: istiofake.NewSimpleClientset(), Store: store})
	if err != nil {
		t.Fatal(err)
	}
	h := src.handler("Service")
	// Each resourceVersion carries a different label, so that every new
	// version is a change the ingester passes on.
	svc := func(rv string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "ns", ResourceVersion: rv,
			Labels: map[string]string{"version": rv}}}
	}
	h.OnAdd(svc("1"), true)
	h.OnUpdate(svc("1"), svc("1"))
	if writes != 1 {
		t.Fatalf("resync wrote the store: %d writes", writes)
	}
	h.OnUpdate(svc("1"), svc("2"))
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/reviews", Obj: svc("2")})
	if writes != 3 || store.Service(reviews) != nil {
		t.Fatalf("writes = %d, service = %v; want an update and a delete", writes, store.Service(reviews))
	}
}
