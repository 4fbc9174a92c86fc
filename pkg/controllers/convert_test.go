package controllers

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func ptr[T any](v T) *T { return &v }

func TestPortProtocol(t *testing.T) {
	cases := []struct {
		name  string
		proto corev1.Protocol
		app   *string
		want  model.Protocol
	}{
		{name: "http", want: model.ProtocolHTTP},
		{name: "http-web", want: model.ProtocolHTTP},
		{name: "HTTP-upper", want: model.ProtocolHTTP},
		{name: "http2-x", want: model.ProtocolHTTP2},
		{name: "grpc", want: model.ProtocolGRPC},
		{name: "grpc-api", want: model.ProtocolGRPC},
		{name: "grpc-web", want: model.ProtocolHTTP},
		{name: "grpc-web-ui", want: model.ProtocolHTTP},
		{name: "https-admin", want: model.ProtocolHTTPS},
		{name: "tls", want: model.ProtocolTLS},
		{name: "tcp-db", want: model.ProtocolTCP},
		{name: "mongo", want: model.ProtocolTCP},
		{name: "redis-cache", want: model.ProtocolTCP},
		{name: "mysql", want: model.ProtocolTCP},
		{name: "udp-dns", want: model.ProtocolUDP},
		{name: "dns", proto: corev1.ProtocolUDP, want: model.ProtocolUDP},
		{name: "http", proto: corev1.ProtocolUDP, want: model.ProtocolUDP},
		{name: "web", want: model.ProtocolUnknown},
		{name: "", want: model.ProtocolUnknown},
		{name: "httpx", want: model.ProtocolUnknown},
		{name: "web", app: ptr("http"), want: model.ProtocolHTTP},
		{name: "tcp", app: ptr("grpc"), want: model.ProtocolGRPC},
		{name: "tcp", app: ptr("kubernetes.io/h2c"), want: model.ProtocolHTTP2},
		{name: "tcp", app: ptr("kubernetes.io/ws"), want: model.ProtocolHTTP},
		{name: "x", app: ptr("grpc-web"), want: model.ProtocolHTTP},
		{name: "x", app: ptr("HTTPS"), want: model.ProtocolHTTPS},
		// An unknown appProtocol falls back to the port name.
		{name: "http", app: ptr("example.com/custom"), want: model.ProtocolHTTP},
	}
	for _, tc := range cases {
		app := "<nil>"
		if tc.app != nil {
			app = *tc.app
		}
		t.Run(tc.name+"/"+string(tc.proto)+"/"+app, func(t *testing.T) {
			proto := tc.proto
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			if got := PortProtocol(tc.name, proto, tc.app); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestConvertService(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	base := func(mut func(*corev1.Service)) *corev1.Service {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{
				Name: "reviews", Namespace: "prod", Labels: map[string]string{"app": "reviews"},
				CreationTimestamp: created,
			},
			Spec: corev1.ServiceSpec{
				ClusterIP:  "10.0.0.10",
				ClusterIPs: []string{"10.0.0.10", "fd00::10"},
				Selector:   map[string]string{"app": "reviews"},
				Ports: []corev1.ServicePort{
					{Name: "http-web", Port: 9080, TargetPort: intstr.FromString("web")},
					{Name: "grpc", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP},
					{Name: "metrics", Port: 9090},
				},
			},
		}
		if mut != nil {
			mut(svc)
		}
		return svc
	}
	full := &model.Service{
		Name: "reviews", Namespace: "prod", Hostname: "reviews.prod.svc.example.org",
		ClusterIPs: []string{"10.0.0.10", "fd00::10"},
		Ports: []*model.Port{
			{Name: "grpc", Port: 80, Protocol: model.ProtocolGRPC, TargetPort: 8080},
			{Name: "http-web", Port: 9080, Protocol: model.ProtocolHTTP, TargetPortName: "web"},
			{Name: "metrics", Port: 9090, Protocol: model.ProtocolUnknown, TargetPort: 9090},
		},
		Labels:       map[string]string{"app": "reviews"},
		Selector:     map[string]string{"app": "reviews"},
		CreationTime: created.Time,
	}
	withExport := func(e model.ExportTo) *model.Service {
		s := *full
		s.ExportTo = e
		return &s
	}
	withExternalName := func(name string) *model.Service {
		s := *full
		s.ClusterIPs, s.Selector, s.ExternalName = nil, nil, name
		return &s
	}
	cases := []struct {
		name string
		in   *corev1.Service
		want *model.Service
	}{
		{name: "full", in: base(nil), want: full},
		{
			name: "headless",
			in: base(func(s *corev1.Service) {
				s.Spec.ClusterIP, s.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
			}),
			want: func() *model.Service { s := *full; s.ClusterIPs = nil; return &s }(),
		},
		{
			name: "only legacy clusterIP",
			in:   base(func(s *corev1.Service) { s.Spec.ClusterIPs = nil }),
			want: func() *model.Service { s := *full; s.ClusterIPs = []string{"10.0.0.10"}; return &s }(),
		},
		{
			// Clients reach the name on the service port: no cluster IP,
			// and the selector means nothing (Kubernetes ignores it).
			name: "external name",
			in: base(func(s *corev1.Service) {
				s.Spec.Type, s.Spec.ExternalName = corev1.ServiceTypeExternalName, "billing.example.com"
			}),
			want: withExternalName("billing.example.com"),
		},
		{
			// Absolute, as Kubernetes allows: kept, so that resolvers do
			// not try the pod's search domains first.
			name: "external name with a trailing dot",
			in: base(func(s *corev1.Service) {
				s.Spec.Type, s.Spec.ExternalName = corev1.ServiceTypeExternalName, "billing.example.com."
			}),
			want: withExternalName("billing.example.com."),
		},
		{
			// Only an unvalidated file can hold it: as in Istio, a service
			// with no address.
			name: "external name type without a name",
			in:   base(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName }),
			want: withExternalName(""),
		},
		{
			name: "external name on a ClusterIP service ignored",
			in:   base(func(s *corev1.Service) { s.Spec.ExternalName = "billing.example.com" }),
			want: full,
		},
		{
			name: "exportTo dot and names",
			in: base(func(s *corev1.Service) {
				s.Annotations = map[string]string{annotationExportTo: " ., istio-system ,prod"}
			}),
			want: withExport(model.ExportTo{"prod", "istio-system"}),
		},
		{
			name: "exportTo star kept",
			in:   base(func(s *corev1.Service) { s.Annotations = map[string]string{annotationExportTo: "*"} }),
			want: withExport(model.ExportTo{"*"}),
		},
		{
			name: "exportTo nobody",
			in:   base(func(s *corev1.Service) { s.Annotations = map[string]string{annotationExportTo: "~"} }),
			want: withExport(model.ExportTo{}),
		},
		{
			name: "load balancer status and external IPs",
			in: base(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.ExternalIPs = []string{"198.51.100.9", "198.51.100.10"}
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
					{IP: "203.0.113.7"}, {Hostname: "lb.example.net"}, {IP: "203.0.113.8", Hostname: "both.example.net"},
					{}, // neither address: dropped
				}
			}),
			want: func() *model.Service {
				s := *full
				s.LoadBalancer = []model.LoadBalancerIngress{
					{IP: "203.0.113.7"}, {Hostname: "lb.example.net"}, {IP: "203.0.113.8", Hostname: "both.example.net"},
				}
				s.ExternalIPs = []string{"198.51.100.9", "198.51.100.10"}
				return &s
			}(),
		},
		{
			name: "load balancer status with no address",
			in: base(func(s *corev1.Service) {
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{}}
				s.Spec.ExternalIPs = []string{}
			}),
			want: full,
		},
		{
			// Node proxies must then pick Pods that are not Ready, as
			// kube-proxy does.
			name: "publishNotReadyAddresses",
			in:   base(func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true }),
			want: func() *model.Service { s := *full; s.PublishNotReady = true; return &s }(),
		},
		{
			// Node proxies must then keep the traffic on the client's node.
			name: "internalTrafficPolicy Local",
			in: base(func(s *corev1.Service) {
				local := corev1.ServiceInternalTrafficPolicyLocal
				s.Spec.InternalTrafficPolicy = &local
			}),
			want: func() *model.Service { s := *full; s.NodeLocal = true; return &s }(),
		},
		{
			name: "internalTrafficPolicy Cluster",
			in: base(func(s *corev1.Service) {
				cluster := corev1.ServiceInternalTrafficPolicyCluster
				s.Spec.InternalTrafficPolicy = &cluster
			}),
			want: full,
		},
		{
			name: "exportTo empty annotation is public",
			in:   base(func(s *corev1.Service) { s.Annotations = map[string]string{annotationExportTo: " "} }),
			want: full,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ConvertService(tc.in, "example.org")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
			// nil vs empty ExportTo mean opposite things; cmp.Diff treats
			// them alike, so check explicitly.
			if (got.ExportTo == nil) != (tc.want.ExportTo == nil) {
				t.Errorf("ExportTo nil = %v, want %v", got.ExportTo == nil, tc.want.ExportTo == nil)
			}
		})
	}
}

func TestConvertPod(t *testing.T) {
	cases := []struct {
		name string
		pod  *corev1.Pod
		want *model.Workload
	}{
		{
			name: "topology labels",
			pod: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{
					labelRegion: "eu", labelZone: "eu-1a", labelSubzone: "rack1", "app": "x",
				}},
				Spec:   corev1.PodSpec{ServiceAccountName: "sa", NodeName: "node1"},
				Status: corev1.PodStatus{PodIP: "10.244.1.5", PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}, {IP: "fd00::5"}}},
			},
			want: &model.Workload{
				Name: "p", Namespace: "ns", IPs: []string{"10.244.1.5", "fd00::5"},
				Labels:         map[string]string{labelRegion: "eu", labelZone: "eu-1a", labelSubzone: "rack1", "app": "x"},
				ServiceAccount: "sa", NodeName: "node1",
				Locality:     model.Locality{Region: "eu", Zone: "eu-1a", SubZone: "rack1"},
				WorkloadName: "p", CanonicalName: "x", CanonicalRevision: "latest",
			},
		},
		{
			name: "istio-locality overrides",
			pod: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{
					labelRegion: "eu", labelIstioLocality: "us.us-2b",
				}},
				Status: corev1.PodStatus{PodIP: "10.244.1.6"},
			},
			want: &model.Workload{
				Name: "p", Namespace: "ns", IPs: []string{"10.244.1.6"},
				Labels:       map[string]string{labelRegion: "eu", labelIstioLocality: "us.us-2b"},
				Locality:     model.Locality{Region: "us", Zone: "us-2b"},
				WorkloadName: "p", CanonicalName: "p", CanonicalRevision: "latest",
			},
		},
		{
			name: "pending pod without IPs",
			pod:  &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}},
			want: &model.Workload{Name: "p", Namespace: "ns", WorkloadName: "p", CanonicalName: "p", CanonicalRevision: "latest"},
		},
		{
			name: "ambient pod of a deployment, ready, captured, on a network",
			pod: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "web-7d4b9-x2x", GenerateName: "web-7d4b9-", Namespace: "ns",
					Labels:      map[string]string{"pod-template-hash": "7d4b9", "version": "v2", model.NetworkLabel: "net1"},
					Annotations: map[string]string{model.AmbientRedirectionAnnotation: model.AmbientRedirectionEnabled},
					OwnerReferences: []metav1.OwnerReference{
						{Kind: "Node", Name: "not-the-controller"},
						{Kind: "ReplicaSet", Name: "web-7d4b9", Controller: ptr(true)},
					}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{
					{Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}}},
					{Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 9090, Protocol: corev1.ProtocolTCP}, {Name: "http", ContainerPort: 1}}},
				}},
				Status: corev1.PodStatus{PodIP: "10.244.1.7",
					Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
			},
			want: &model.Workload{
				Name: "web-7d4b9-x2x", Namespace: "ns", IPs: []string{"10.244.1.7"},
				Labels:       map[string]string{"pod-template-hash": "7d4b9", "version": "v2", model.NetworkLabel: "net1"},
				WorkloadName: "web", CanonicalName: "web", CanonicalRevision: "v2",
				Ready: true, Redirected: true,
				NamedPorts: []model.NamedPort{{Name: "grpc", Port: 9090}, {Name: "http", Port: 8080}},
			},
		},
		{
			name: "terminating pod of a cronjob is not ready; another annotation value is not capture",
			pod: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "backup-28123456-abcde", GenerateName: "backup-28123456-", Namespace: "ns",
					DeletionTimestamp: &metav1.Time{},
					Annotations:       map[string]string{model.AmbientRedirectionAnnotation: "pending"},
					OwnerReferences:   []metav1.OwnerReference{{Kind: "Job", Name: "backup-28123456", Controller: ptr(true)}}},
				Spec: corev1.PodSpec{HostNetwork: true},
				Status: corev1.PodStatus{PodIP: "10.0.0.9",
					Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
			},
			want: &model.Workload{
				Name: "backup-28123456-abcde", Namespace: "ns", IPs: []string{"10.0.0.9"},
				WorkloadName: "backup", CanonicalName: "backup", CanonicalRevision: "latest", HostNetwork: true,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ConvertPod(tc.pod)); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

// testSlice builds an EndpointSlice for service "reviews" in namespace ns.
func testSlice(name string, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ns",
			Labels: map[string]string{discoveryv1.LabelServiceName: "reviews"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       ports,
		Endpoints:   eps,
	}
}

func podRef(name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Pod", Name: name}
}

func TestConvertEndpointSlice(t *testing.T) {
	v1Labels := map[string]string{"app": "reviews", "version": "v1", labelRegion: "eu", labelSubzone: "s1"}
	pinnedLabels := map[string]string{"version": "v2", labelIstioLocality: "r.z.s"}
	injectedLabels := map[string]string{"app": "ratings", model.TLSModeLabel: model.TLSModeIstio}
	workloads := map[model.NamespacedName]*model.Workload{
		{Namespace: "ns", Name: "pod-v1"}: {Name: "pod-v1", Namespace: "ns", Labels: v1Labels, ServiceAccount: "sa-v1",
			NodeName: "node-a", Locality: podLocality(v1Labels)},
		{Namespace: "ns", Name: "pod-pinned"}: {Name: "pod-pinned", Namespace: "ns", Labels: pinnedLabels,
			Locality: podLocality(pinnedLabels)},
		{Namespace: "ns", Name: "pod-injected"}: {Name: "pod-injected", Namespace: "ns", Labels: injectedLabels,
			ServiceAccount: "ratings"},
	}
	lookup := func(k model.NamespacedName) *model.Workload { return workloads[k] }
	twoPorts := []discoveryv1.EndpointPort{
		{Name: ptr("http"), Port: ptr[int32](8080)},
		{Name: ptr(""), Port: ptr[int32](9090)},
	}
	cases := []struct {
		name  string
		slice *discoveryv1.EndpointSlice
		want  []*model.Endpoint
	}{
		{
			name: "addresses times ports with pod details",
			slice: testSlice("s", twoPorts, discoveryv1.Endpoint{
				Addresses: []string{"10.244.1.5", "10.244.1.6"}, TargetRef: podRef("pod-v1"), Zone: ptr("eu-1a"),
			}),
			want: func() []*model.Endpoint {
				base := model.Endpoint{Labels: v1Labels, ServiceAccount: "sa-v1", FromPod: true,
					Namespace: "ns", Locality: model.Locality{Region: "eu", Zone: "eu-1a", SubZone: "s1"}}
				var out []*model.Endpoint
				for _, addr := range []string{"10.244.1.5", "10.244.1.6"} {
					for _, p := range []struct {
						name string
						port uint32
					}{{"http", 8080}, {"", 9090}} {
						e := base
						e.Address, e.Port, e.ServicePortName = addr, p.port, p.name
						out = append(out, &e)
					}
				}
				return out
			}(),
		},
		{
			name: "health conditions",
			slice: testSlice("s", twoPorts[:1],
				discoveryv1.Endpoint{Addresses: []string{"10.244.1.1"}},
				discoveryv1.Endpoint{Addresses: []string{"10.244.1.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}},
				discoveryv1.Endpoint{Addresses: []string{"10.244.1.3"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(false)}},
				discoveryv1.Endpoint{Addresses: []string{"10.244.1.4"}, Conditions: discoveryv1.EndpointConditions{
					Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}},
				discoveryv1.Endpoint{Addresses: []string{"10.244.1.5"}, Conditions: discoveryv1.EndpointConditions{
					Ready: ptr(false), Serving: ptr(false), Terminating: ptr(true)}},
				discoveryv1.Endpoint{Addresses: []string{"10.244.1.6"}, Conditions: discoveryv1.EndpointConditions{
					Ready: ptr(false), Serving: ptr(true)}},
			),
			want: []*model.Endpoint{
				{Address: "10.244.1.1", Port: 8080, ServicePortName: "http", Namespace: "ns", Health: model.Healthy},
				{Address: "10.244.1.2", Port: 8080, ServicePortName: "http", Namespace: "ns", Health: model.Healthy},
				{Address: "10.244.1.3", Port: 8080, ServicePortName: "http", Namespace: "ns", Health: model.Unhealthy},
				{Address: "10.244.1.4", Port: 8080, ServicePortName: "http", Namespace: "ns", Health: model.Draining},
				{Address: "10.244.1.5", Port: 8080, ServicePortName: "http", Namespace: "ns", Health: model.Unhealthy},
				{Address: "10.244.1.6", Port: 8080, ServicePortName: "http", Namespace: "ns", Health: model.Unhealthy},
			},
		},
		{
			name: "istio-locality overrides slice zone",
			slice: testSlice("s", twoPorts[:1], discoveryv1.Endpoint{
				Addresses: []string{"10.244.1.7"}, TargetRef: podRef("pod-pinned"), Zone: ptr("other"), NodeName: ptr("node-b"),
			}),
			want: []*model.Endpoint{{Address: "10.244.1.7", Port: 8080, ServicePortName: "http", Namespace: "ns",
				Labels: pinnedLabels, FromPod: true,
				Locality: model.Locality{Region: "r", Zone: "z", SubZone: "s"}}},
		},
		{
			name: "an injected pod's endpoint is marked for mutual TLS",
			slice: testSlice("s", twoPorts[:1], discoveryv1.Endpoint{
				Addresses: []string{"10.244.1.10"}, TargetRef: podRef("pod-injected"),
			}),
			want: []*model.Endpoint{{Address: "10.244.1.10", Port: 8080, ServicePortName: "http", Namespace: "ns",
				Labels: injectedLabels, MTLS: true, ServiceAccount: "ratings", FromPod: true}},
		},
		{
			// Still the Pod's endpoint: node proxies learn it from the Pod.
			name: "pod not known yet",
			slice: testSlice("s", twoPorts[:1], discoveryv1.Endpoint{
				Addresses: []string{"10.244.1.8"}, TargetRef: podRef("pod-late"), Zone: ptr("z1"),
			}),
			want: []*model.Endpoint{{Address: "10.244.1.8", Port: 8080, ServicePortName: "http", Namespace: "ns",
				Locality: model.Locality{Zone: "z1"}, FromPod: true}},
		},
		{
			name: "ports without number are skipped",
			slice: testSlice("s", []discoveryv1.EndpointPort{{Name: ptr("all")}, {Name: ptr("http"), Port: ptr[int32](80)}},
				discoveryv1.Endpoint{Addresses: []string{"10.244.1.9"}}),
			want: []*model.Endpoint{{Address: "10.244.1.9", Port: 80, ServicePortName: "http", Namespace: "ns"}},
		},
		{
			name: "fqdn slices are skipped",
			slice: func() *discoveryv1.EndpointSlice {
				s := testSlice("s", twoPorts, discoveryv1.Endpoint{Addresses: []string{"example.com"}})
				s.AddressType = discoveryv1.AddressTypeFQDN
				return s
			}(),
		},
		{
			name: "an endpoint that names something other than a Pod is not a Pod's",
			slice: testSlice("s", twoPorts[:1], discoveryv1.Endpoint{
				Addresses: []string{"10.244.1.11"}, TargetRef: &corev1.ObjectReference{Kind: "Node", Name: "node-a"},
			}),
			want: []*model.Endpoint{{Address: "10.244.1.11", Port: 8080, ServicePortName: "http", Namespace: "ns"}},
		},
		{name: "no endpoints", slice: testSlice("s", twoPorts)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ConvertEndpointSlice(tc.slice, lookup)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
			for _, e := range got {
				if e.Labels != nil && !slices.ContainsFunc(slices.Collect(maps.Values(workloads)),
					func(w *model.Workload) bool { return sameMap(e.Labels, w.Labels) }) {
					t.Errorf("endpoint %s copies its pod's labels instead of sharing them", e.Address)
				}
			}
		})
	}
}

// sameMap reports whether two maps are the same map object.
func sameMap(a, b map[string]string) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	const probe = "\x00meshpilot-probe"
	a[probe] = "x"
	_, shared := b[probe]
	delete(a, probe)
	return shared
}

func BenchmarkEndpointSliceConvert(b *testing.B) {
	labels := map[string]string{"app": "reviews", "version": "v1"}
	workloads := map[model.NamespacedName]*model.Workload{}
	var eps []discoveryv1.Endpoint
	for i := range 100 {
		name := "pod-" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		workloads[model.NamespacedName{Namespace: "ns", Name: name}] = &model.Workload{
			Name: name, Namespace: "ns", Labels: labels, ServiceAccount: "sa",
		}
		eps = append(eps, discoveryv1.Endpoint{
			Addresses: []string{"10.244." + string(rune('0'+i/10)) + "." + string(rune('0'+i%10))},
			TargetRef: podRef(name), Zone: ptr("z1"),
		})
	}
	slice := testSlice("s", []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](8080)}}, eps...)
	lookup := func(k model.NamespacedName) *model.Workload { return workloads[k] }
	b.ReportAllocs()
	for b.Loop() {
		if got := ConvertEndpointSlice(slice, lookup); len(got) != 100 {
			b.Fatalf("got %d endpoints", len(got))
		}
	}
}
