package controllers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	k8snetworkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func serviceBackend(name string, port k8snetworkingv1.ServiceBackendPort) k8snetworkingv1.IngressBackend {
	return k8snetworkingv1.IngressBackend{Service: &k8snetworkingv1.IngressServiceBackend{Name: name, Port: port}}
}

func httpPath(path string, pathType *k8snetworkingv1.PathType, backend k8snetworkingv1.IngressBackend) k8snetworkingv1.HTTPIngressPath {
	return k8snetworkingv1.HTTPIngressPath{Path: path, PathType: pathType, Backend: backend}
}

func TestConvertIngress(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	exact := ptr(k8snetworkingv1.PathTypeExact)
	prefix := ptr(k8snetworkingv1.PathTypePrefix)
	implSpecific := ptr(k8snetworkingv1.PathTypeImplementationSpecific)
	base := func(mut func(*k8snetworkingv1.Ingress)) *k8snetworkingv1.Ingress {
		ing := &k8snetworkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", ResourceVersion: "42", Generation: 3,
				CreationTimestamp: created},
		}
		if mut != nil {
			mut(ing)
		}
		return ing
	}
	meta := func(mut func(*model.Ingress)) *model.Ingress {
		ing := &model.Ingress{Name: "web", Namespace: "shop", Revision: "42", Generation: 3, CreationTime: created.Time}
		if mut != nil {
			mut(ing)
		}
		return ing
	}
	cases := []struct {
		name string
		in   *k8snetworkingv1.Ingress
		want *model.Ingress
	}{
		{name: "empty spec", in: base(nil), want: meta(nil)},
		{
			name: "class name and legacy annotation kept as written",
			in: base(func(i *k8snetworkingv1.Ingress) {
				i.Spec.IngressClassName = ptr("istio")
				i.Annotations = map[string]string{annotationIngressClass: "nginx", "other": "x"}
			}),
			want: meta(func(i *model.Ingress) { i.ClassName, i.ClassAnnotation = "istio", ptr("nginx") }),
		},
		{
			name: "an empty legacy annotation is kept as present",
			in: base(func(i *k8snetworkingv1.Ingress) {
				i.Annotations = map[string]string{annotationIngressClass: ""}
			}),
			want: meta(func(i *model.Ingress) { i.ClassAnnotation = ptr("") }),
		},
		{
			name: "rules with every path type and both port forms",
			in: base(func(i *k8snetworkingv1.Ingress) {
				i.Spec.Rules = []k8snetworkingv1.IngressRule{
					{Host: "shop.example.com", IngressRuleValue: k8snetworkingv1.IngressRuleValue{HTTP: &k8snetworkingv1.HTTPIngressRuleValue{
						Paths: []k8snetworkingv1.HTTPIngressPath{
							httpPath("/cart", exact, serviceBackend("cart", k8snetworkingv1.ServiceBackendPort{Number: 8080})),
							httpPath("/api", prefix, serviceBackend("api", k8snetworkingv1.ServiceBackendPort{Name: "http"})),
							httpPath("/static", implSpecific, serviceBackend("static", k8snetworkingv1.ServiceBackendPort{Number: 80})),
						},
					}}},
					{IngressRuleValue: k8snetworkingv1.IngressRuleValue{HTTP: &k8snetworkingv1.HTTPIngressRuleValue{
						Paths: []k8snetworkingv1.HTTPIngressPath{
							httpPath("/", prefix, serviceBackend("fallback", k8snetworkingv1.ServiceBackendPort{Number: 9090})),
						},
					}}},
				}
			}),
			want: meta(func(i *model.Ingress) {
				i.Rules = []model.IngressRule{
					{Host: "shop.example.com", Paths: []model.IngressPath{
						{Path: "/cart", PathType: model.PathTypeExact, Backend: model.IngressBackend{ServiceName: "cart", PortNumber: 8080}},
						{Path: "/api", PathType: model.PathTypePrefix, Backend: model.IngressBackend{ServiceName: "api", PortName: "http"}},
						{Path: "/static", PathType: model.PathTypeImplementationSpecific,
							Backend: model.IngressBackend{ServiceName: "static", PortNumber: 80}},
					}},
					{Paths: []model.IngressPath{
						{Path: "/", PathType: model.PathTypePrefix, Backend: model.IngressBackend{ServiceName: "fallback", PortNumber: 9090}},
					}},
				}
			}),
		},
		{
			name: "missing pathType is implementation specific; invalid paths kept for reporting",
			in: base(func(i *k8snetworkingv1.Ingress) {
				i.Spec.Rules = []k8snetworkingv1.IngressRule{{Host: "a.example.com",
					IngressRuleValue: k8snetworkingv1.IngressRuleValue{HTTP: &k8snetworkingv1.HTTPIngressRuleValue{
						Paths: []k8snetworkingv1.HTTPIngressPath{
							httpPath("", nil, serviceBackend("a", k8snetworkingv1.ServiceBackendPort{Number: 80})),
							httpPath("no-slash", exact, serviceBackend("a", k8snetworkingv1.ServiceBackendPort{Number: 80})),
						},
					}}}}
			}),
			want: meta(func(i *model.Ingress) {
				i.Rules = []model.IngressRule{{Host: "a.example.com", Paths: []model.IngressPath{
					{PathType: model.PathTypeImplementationSpecific, Backend: model.IngressBackend{ServiceName: "a", PortNumber: 80}},
					{Path: "no-slash", PathType: model.PathTypeExact, Backend: model.IngressBackend{ServiceName: "a", PortNumber: 80}},
				}}}
			}),
		},
		{
			name: "host-only rule kept without paths",
			in: base(func(i *k8snetworkingv1.Ingress) {
				i.Spec.Rules = []k8snetworkingv1.IngressRule{{Host: "bare.example.com"}}
			}),
			want: meta(func(i *model.Ingress) { i.Rules = []model.IngressRule{{Host: "bare.example.com"}} }),
		},
		{
			name: "default backend by service and resource backends recorded",
			in: base(func(i *k8snetworkingv1.Ingress) {
				b := serviceBackend("default-http", k8snetworkingv1.ServiceBackendPort{Number: 80})
				i.Spec.DefaultBackend = &b
				i.Spec.Rules = []k8snetworkingv1.IngressRule{{Host: "files.example.com",
					IngressRuleValue: k8snetworkingv1.IngressRuleValue{HTTP: &k8snetworkingv1.HTTPIngressRuleValue{
						Paths: []k8snetworkingv1.HTTPIngressPath{
							httpPath("/bucket", prefix, k8snetworkingv1.IngressBackend{Resource: &corev1.TypedLocalObjectReference{
								APIGroup: ptr("storage.example.com"), Kind: "Bucket", Name: "assets"}}),
							httpPath("/core", prefix, k8snetworkingv1.IngressBackend{Resource: &corev1.TypedLocalObjectReference{
								Kind: "ConfigMap", Name: "page"}}),
						},
					}}}}
			}),
			want: meta(func(i *model.Ingress) {
				i.DefaultBackend = &model.IngressBackend{ServiceName: "default-http", PortNumber: 80}
				i.Rules = []model.IngressRule{{Host: "files.example.com", Paths: []model.IngressPath{
					{Path: "/bucket", PathType: model.PathTypePrefix, Backend: model.IngressBackend{Resource: "storage.example.com/Bucket"}},
					{Path: "/core", PathType: model.PathTypePrefix, Backend: model.IngressBackend{Resource: "ConfigMap"}},
				}}}
			}),
		},
		{
			name: "tls entries and current load balancer status",
			in: base(func(i *k8snetworkingv1.Ingress) {
				i.Spec.TLS = []k8snetworkingv1.IngressTLS{
					{Hosts: []string{"shop.example.com", "www.example.com"}, SecretName: "shop-cert"},
					{SecretName: "wildcard"},
				}
				i.Status.LoadBalancer.Ingress = []k8snetworkingv1.IngressLoadBalancerIngress{
					{IP: "203.0.113.7"}, {Hostname: "lb.example.net"},
				}
			}),
			want: meta(func(i *model.Ingress) {
				i.TLS = []model.IngressTLS{
					{Hosts: []string{"shop.example.com", "www.example.com"}, SecretName: "shop-cert"},
					{SecretName: "wildcard"},
				}
				i.LoadBalancer = []model.LoadBalancerIngress{{IP: "203.0.113.7"}, {Hostname: "lb.example.net"}}
			}),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ConvertIngress(tc.in)); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestSameIngress(t *testing.T) {
	created := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	base := func(mut func(*model.Ingress)) *model.Ingress {
		ing := &model.Ingress{Name: "web", Namespace: "shop", Revision: "1", Generation: 1, CreationTime: created,
			Rules: []model.IngressRule{{Host: "a", Paths: []model.IngressPath{{Path: "/", PathType: model.PathTypePrefix,
				Backend: model.IngressBackend{ServiceName: "a", PortNumber: 80}}}}}}
		if mut != nil {
			mut(ing)
		}
		return ing
	}
	cases := []struct {
		name  string
		other *model.Ingress
		same  bool
	}{
		{name: "only the revision differs", other: base(func(i *model.Ingress) { i.Revision = "2" }), same: true},
		{name: "same instant in another zone", other: base(func(i *model.Ingress) { i.CreationTime = created.Local() }), same: true},
		{name: "creation time", other: base(func(i *model.Ingress) { i.CreationTime = created.Add(time.Second) })},
		{name: "generation", other: base(func(i *model.Ingress) { i.Generation = 2 })},
		{name: "backend port", other: base(func(i *model.Ingress) { i.Rules[0].Paths[0].Backend.PortNumber = 81 })},
		{name: "class", other: base(func(i *model.Ingress) { i.ClassName = "istio" })},
		// The ingester stores a status change apart (Store.SetIngressStatus).
		{name: "only the status differs", other: base(func(i *model.Ingress) {
			i.Revision, i.LoadBalancer = "2", []model.LoadBalancerIngress{{IP: "1.2.3.4"}}
		}), same: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := sameIngress(base(nil), tc.other); got != tc.same {
				t.Errorf("sameIngress = %v, want %v", got, tc.same)
			}
		})
	}
}

func TestConvertIngressClass(t *testing.T) {
	cases := []struct {
		name        string
		annotations map[string]string
		controller  string
		want        *model.IngressClass
	}{
		{name: "istio", controller: model.IngressController,
			want: &model.IngressClass{Name: "istio", Controller: model.IngressController}},
		{name: "default", controller: model.IngressController,
			annotations: map[string]string{annotationDefaultIngressClass: "true"},
			want:        &model.IngressClass{Name: "default", Controller: model.IngressController, IsDefault: true}},
		{name: "not default when false", controller: "k8s.io/ingress-nginx",
			annotations: map[string]string{annotationDefaultIngressClass: "false"},
			want:        &model.IngressClass{Name: "not default when false", Controller: "k8s.io/ingress-nginx"}},
		{name: "only exactly true counts", controller: "k8s.io/ingress-nginx",
			annotations: map[string]string{annotationDefaultIngressClass: "True"},
			want:        &model.IngressClass{Name: "only exactly true counts", Controller: "k8s.io/ingress-nginx"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := &k8snetworkingv1.IngressClass{
				ObjectMeta: metav1.ObjectMeta{Name: tc.name, Annotations: tc.annotations},
				Spec:       k8snetworkingv1.IngressClassSpec{Controller: tc.controller},
			}
			if diff := cmp.Diff(tc.want, ConvertIngressClass(in)); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

// BenchmarkConvertIngress converts an Ingress of one host with five paths
// and TLS, the shape of the ingress translation benchmark's inputs.
func BenchmarkConvertIngress(b *testing.B) {
	prefix := ptr(k8snetworkingv1.PathTypePrefix)
	var paths []k8snetworkingv1.HTTPIngressPath
	for _, p := range []string{"/a", "/b", "/c", "/d", "/e"} {
		paths = append(paths, httpPath(p, prefix, serviceBackend("svc"+p[1:], k8snetworkingv1.ServiceBackendPort{Number: 80})))
	}
	ing := &k8snetworkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", ResourceVersion: "1",
			Annotations: map[string]string{annotationIngressClass: "istio"}},
		Spec: k8snetworkingv1.IngressSpec{
			TLS: []k8snetworkingv1.IngressTLS{{Hosts: []string{"shop.example.com"}, SecretName: "cert"}},
			Rules: []k8snetworkingv1.IngressRule{{Host: "shop.example.com", IngressRuleValue: k8snetworkingv1.IngressRuleValue{
				HTTP: &k8snetworkingv1.HTTPIngressRuleValue{Paths: paths}}}},
		},
	}
	b.ReportAllocs()
	for b.Loop() {
		if got := ConvertIngress(ing); len(got.Rules[0].Paths) != 5 {
			b.Fatalf("got %d paths", len(got.Rules[0].Paths))
		}
	}
}
