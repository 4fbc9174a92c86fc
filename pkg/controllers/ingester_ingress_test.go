package controllers

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	k8snetworkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

const (
	ingressClassYAML = `apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: istio
  namespace: ignored-for-cluster-scoped
  annotations: {ingressclass.kubernetes.io/is-default-class: "true"}
spec:
  controller: istio.io/ingress-controller
`
	ingressYAML = `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  namespace: ns
  creationTimestamp: "2026-02-03T04:05:06Z"
  annotations: {kubernetes.io/ingress.class: istio}
spec:
  ingressClassName: istio
  defaultBackend:
    service: {name: fallback, port: {number: 80}}
  tls:
  - hosts: [shop.example.com]
    secretName: shop-cert
  rules:
  - host: shop.example.com
    http:
      paths:
      - {path: /cart, pathType: Exact, backend: {service: {name: cart, port: {number: 8080}}}}
      - {path: /api, pathType: Prefix, backend: {service: {name: api, port: {name: http}}}}
      - {path: /legacy, backend: {service: {name: api, port: {name: http}}}}
status:
  loadBalancer:
    ingress: [{ip: 203.0.113.7}]
`
	tlsSecretYAML = `apiVersion: v1
kind: Secret
metadata: {name: shop-cert, namespace: ns}
type: kubernetes.io/tls
data:
  tls.crt: dGxzLWNlcnQtcGVt
  tls.key: dGxzLWtleS1wZW0=
`
	istioSecretYAML = `apiVersion: v1
kind: Secret
metadata: {name: generic-cert, namespace: ns}
type: Opaque
stringData: {cert: generic-cert-pem, key: generic-key-pem, cacert: generic-ca-pem}
`
	opaqueSecretYAML = `apiVersion: v1
kind: Secret
metadata: {name: db-password, namespace: ns}
type: Opaque
stringData: {password: hunter2}
`
	gatewayServiceYAML = `apiVersion: v1
kind: Service
metadata: {name: istio-ingressgateway, namespace: istio-system}
spec:
  type: LoadBalancer
  externalIPs: [198.51.100.9]
  ports: [{name: http2, port: 80, targetPort: 8080}]
status:
  loadBalancer:
    ingress: [{ip: 203.0.113.7}, {hostname: gw.example.net}, {}]
`
)

// TestIngesterIngressYAML goes the way test fixtures do (DecodeYAML, then
// the Ingester) and checks every new kind lands in the store converted.
func TestIngesterIngressYAML(t *testing.T) {
	objs, errs := DecodeYAML([]byte(ingressClassYAML + "---\n" + ingressYAML + "---\n" + tlsSecretYAML + "---\n" +
		istioSecretYAML + "---\n" + opaqueSecretYAML + "---\n" + gatewayServiceYAML))
	if len(errs) != 0 {
		t.Fatalf("decode errors: %v", errs)
	}
	store := model.NewStore()
	in := NewIngester(IngesterOptions{Store: store})
	mustUpsert(t, in, anySlice(objs)...)

	wantIngress := &model.Ingress{
		Name: "shop", Namespace: "ns", ClassName: "istio", ClassAnnotation: ptr("istio"),
		CreationTime:   time.Date(2026, 2, 3, 4, 5, 6, 0, time.UTC),
		DefaultBackend: &model.IngressBackend{ServiceName: "fallback", PortNumber: 80},
		Rules: []model.IngressRule{{Host: "shop.example.com", Paths: []model.IngressPath{
			{Path: "/cart", PathType: model.PathTypeExact, Backend: model.IngressBackend{ServiceName: "cart", PortNumber: 8080}},
			{Path: "/api", PathType: model.PathTypePrefix, Backend: model.IngressBackend{ServiceName: "api", PortName: "http"}},
			{Path: "/legacy", PathType: model.PathTypeImplementationSpecific,
				Backend: model.IngressBackend{ServiceName: "api", PortName: "http"}},
		}}},
		TLS:          []model.IngressTLS{{Hosts: []string{"shop.example.com"}, SecretName: "shop-cert"}},
		LoadBalancer: []model.LoadBalancerIngress{{IP: "203.0.113.7"}},
	}
	got := store.Ingress(model.NamespacedName{Namespace: "ns", Name: "shop"})
	if got == nil {
		t.Fatal("ingress not stored")
	}
	if got.Revision == "" {
		t.Error("a file's ingress has no revision (content hash expected)")
	}
	if diff := cmp.Diff(wantIngress, got, cmp.FilterPath(func(p cmp.Path) bool {
		return p.Last().String() == ".Revision"
	}, cmp.Ignore())); diff != "" {
		t.Errorf("ingress (-want +got)\n%s", diff)
	}
	if diff := cmp.Diff([]*model.IngressClass{{Name: "istio", Controller: model.IngressController, IsDefault: true}},
		store.IngressClasses()); diff != "" {
		t.Errorf("classes (-want +got)\n%s", diff)
	}
	for _, tc := range []struct {
		name string
		want *model.Secret
	}{
		{"shop-cert", &model.Secret{Name: "shop-cert", Namespace: "ns", Type: "kubernetes.io/tls",
			Cert: []byte("tls-cert-pem"), PrivateKey: []byte("tls-key-pem")}},
		{"generic-cert", &model.Secret{Name: "generic-cert", Namespace: "ns", Type: "Opaque",
			Cert: []byte("generic-cert-pem"), PrivateKey: []byte("generic-key-pem"), CACert: []byte("generic-ca-pem")}},
		{"db-password", nil}, // holds no TLS key
	} {
		if diff := cmp.Diff(tc.want, store.Secret(model.NamespacedName{Namespace: "ns", Name: tc.name})); diff != "" {
			t.Errorf("secret %s (-want +got)\n%s", tc.name, diff)
		}
	}
	gw := store.Service(model.NamespacedName{Namespace: "istio-system", Name: "istio-ingressgateway"})
	if gw == nil {
		t.Fatal("gateway service not stored")
	}
	if diff := cmp.Diff([]model.LoadBalancerIngress{{IP: "203.0.113.7"}, {Hostname: "gw.example.net"}}, gw.LoadBalancer); diff != "" {
		t.Errorf("service load balancer (-want +got)\n%s", diff)
	}
	if diff := cmp.Diff([]string{"198.51.100.9"}, gw.ExternalIPs); diff != "" {
		t.Errorf("service external IPs (-want +got)\n%s", diff)
	}
}

func anySlice[T any](in []T) []any {
	out := make([]any, len(in))
	for i, v := range in {
		out[i] = v
	}
	return out
}

// TestIngesterIngressKinds checks upserts, deletes and the no-op skip of
// Ingresses, IngressClasses and Secrets, by the store writes they cause.
func TestIngesterIngressKinds(t *testing.T) {
	ingress := func(rv, host string, labels map[string]string) *k8snetworkingv1.Ingress {
		return &k8snetworkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", ResourceVersion: rv, Labels: labels},
			Spec:       k8snetworkingv1.IngressSpec{Rules: []k8snetworkingv1.IngressRule{{Host: host}}},
		}
	}
	class := func(controller string, annotations map[string]string) *k8snetworkingv1.IngressClass {
		return &k8snetworkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "istio", Annotations: annotations},
			Spec: k8snetworkingv1.IngressClassSpec{Controller: controller}}
	}
	secret := func(rv string, data map[string][]byte, annotations map[string]string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cert", Namespace: "ns", ResourceVersion: rv,
			Annotations: annotations}, Type: corev1.SecretTypeTLS, Data: data}
	}
	tlsData := func(cert string) map[string][]byte {
		return map[string][]byte{"tls.crt": []byte(cert), "tls.key": []byte("key")}
	}
	withStatus := func(ing *k8snetworkingv1.Ingress, ip string) *k8snetworkingv1.Ingress {
		ing.Status.LoadBalancer.Ingress = []k8snetworkingv1.IngressLoadBalancerIngress{{IP: ip}}
		return ing
	}
	ingressKey := model.ConfigKey{Kind: model.KindIngress, Namespace: "ns", Name: "web"}
	statusKey := model.ConfigKey{Kind: model.KindIngressStatus, Namespace: "ns", Name: "web"}
	classKey := model.ConfigKey{Kind: model.KindIngressClass, Name: "istio"}
	secretKey := model.ConfigKey{Kind: model.KindSecret, Namespace: "ns", Name: "cert"}

	type op struct {
		obj    any
		delete bool
	}
	cases := []struct {
		name    string
		ops     []op
		want    []model.ConfigKey // store writes, in order
		inStore bool              // whether the object is there at the end
	}{
		{name: "ingress added", ops: []op{{obj: ingress("1", "a", nil)}}, want: []model.ConfigKey{ingressKey}, inStore: true},
		{name: "ingress changed", ops: []op{{obj: ingress("1", "a", nil)}, {obj: ingress("2", "b", nil)}},
			want: []model.ConfigKey{ingressKey, ingressKey}, inStore: true},
		{name: "ingress metadata-only change skipped",
			ops:  []op{{obj: ingress("1", "a", nil)}, {obj: ingress("2", "a", map[string]string{"team": "x"})}},
			want: []model.ConfigKey{ingressKey}, inStore: true},
		{name: "ingress status-only change announced as such",
			ops:  []op{{obj: ingress("1", "a", nil)}, {obj: withStatus(ingress("2", "a", nil), "203.0.113.7")}},
			want: []model.ConfigKey{ingressKey, statusKey}, inStore: true},
		{name: "ingress status and spec changed together",
			ops:  []op{{obj: ingress("1", "a", nil)}, {obj: withStatus(ingress("2", "b", nil), "203.0.113.7")}},
			want: []model.ConfigKey{ingressKey, ingressKey}, inStore: true},
		{name: "ingress deleted", ops: []op{{obj: ingress("1", "a", nil)}, {obj: ingress("1", "a", nil), delete: true}},
			want: []model.ConfigKey{ingressKey, ingressKey}},
		{name: "class added then made default",
			ops:  []op{{obj: class(model.IngressController, nil)}, {obj: class(model.IngressController, map[string]string{annotationDefaultIngressClass: "true"})}},
			want: []model.ConfigKey{classKey, classKey}, inStore: true},
		{name: "class unchanged skipped",
			ops:  []op{{obj: class(model.IngressController, nil)}, {obj: class(model.IngressController, map[string]string{"x": "y"})}},
			want: []model.ConfigKey{classKey}, inStore: true},
		{name: "class deleted", ops: []op{{obj: class("other", nil)}, {obj: class("other", nil), delete: true}},
			want: []model.ConfigKey{classKey, classKey}},
		{name: "secret rotated", ops: []op{{obj: secret("1", tlsData("c1"), nil)}, {obj: secret("2", tlsData("c2"), nil)}},
			want: []model.ConfigKey{secretKey, secretKey}, inStore: true},
		{name: "secret metadata-only change skipped",
			ops:  []op{{obj: secret("1", tlsData("c1"), nil)}, {obj: secret("2", tlsData("c1"), map[string]string{"cert-manager.io/x": "y"})}},
			want: []model.ConfigKey{secretKey}, inStore: true},
		{name: "secret losing every tls key is dropped",
			ops:  []op{{obj: secret("1", tlsData("c1"), nil)}, {obj: secret("2", map[string][]byte{"other": nil}, nil)}},
			want: []model.ConfigKey{secretKey, secretKey}},
		{name: "secret without tls keys never stored", ops: []op{{obj: secret("1", nil, nil)}}},
		{name: "secret deleted", ops: []op{{obj: secret("1", tlsData("c1"), nil)}, {obj: secret("1", nil, nil), delete: true}},
			want: []model.ConfigKey{secretKey, secretKey}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := model.NewStore()
			var writes []model.ConfigKey
			store.OnChange(func(k model.ConfigKey) { writes = append(writes, k) })
			in := NewIngester(IngesterOptions{Store: store})
			for _, o := range tc.ops {
				apply := in.Upsert
				if o.delete {
					apply = in.Delete
				}
				if err := apply(o.obj); err != nil {
					t.Fatalf("%T: %v", o.obj, err)
				}
			}
			if diff := cmp.Diff(tc.want, writes); diff != "" {
				t.Errorf("store writes (-want +got)\n%s", diff)
			}
			inStore := store.Ingress(model.NamespacedName{Namespace: "ns", Name: "web"}) != nil ||
				len(store.IngressClasses()) > 0 || store.Secret(model.NamespacedName{Namespace: "ns", Name: "cert"}) != nil
			if inStore != tc.inStore {
				t.Errorf("object in store = %v, want %v", inStore, tc.inStore)
			}
		})
	}
}

// TestIngesterIngressStatusOnlyChange: the status writer's own writes come
// back from the API server as Ingress updates with a new resourceVersion
// and nothing else changed. The writer must see the new status, but with one
// write per Ingress on every gateway address change, each must cost neither
// a push of the gateway nor a new translation.
func TestIngesterIngressStatusOnlyChange(t *testing.T) {
	store := model.NewStore()
	in := NewIngester(IngesterOptions{Store: store})
	ing := &k8snetworkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", ResourceVersion: "1"},
		Spec: k8snetworkingv1.IngressSpec{IngressClassName: ptr("istio"), Rules: []k8snetworkingv1.IngressRule{{
			Host: "shop.example.com",
			IngressRuleValue: k8snetworkingv1.IngressRuleValue{HTTP: &k8snetworkingv1.HTTPIngressRuleValue{
				Paths: []k8snetworkingv1.HTTPIngressPath{httpPath("/", ptr(k8snetworkingv1.PathTypePrefix),
					serviceBackend("cart", k8snetworkingv1.ServiceBackendPort{Number: 80}))},
			}},
		}}},
	}
	mustUpsert(t, in,
		&k8snetworkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "istio"},
			Spec: k8snetworkingv1.IngressClassSpec{Controller: model.IngressController}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "istio-ingressgateway", Namespace: "istio-system"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}},
		ing)
	pc := pushcontext.Build(store, pushcontext.Options{DomainSuffix: "cluster.local"}, nil, nil)
	if pc.IngressGateway() == nil {
		t.Fatal("the Ingress is not served")
	}
	var announced []model.ConfigKey
	store.OnChange(func(k model.ConfigKey) { announced = append(announced, k) })

	written := ing.DeepCopy()
	written.ResourceVersion = "2"
	written.Status.LoadBalancer.Ingress = []k8snetworkingv1.IngressLoadBalancerIngress{{IP: "203.0.113.7"}}
	mustUpsert(t, in, written)

	key := model.NamespacedName{Namespace: "ns", Name: "web"}
	if diff := cmp.Diff([]model.LoadBalancerIngress{{IP: "203.0.113.7"}}, store.Ingress(key).LoadBalancer); diff != "" {
		t.Errorf("status the writer reads (-want +got)\n%s", diff)
	}
	// An Ingress change is what pushes the gateway (its listeners, routes
	// and secrets).
	if slices.Contains(announced, model.ConfigKey{Kind: model.KindIngress, Namespace: "ns", Name: "web"}) {
		t.Errorf("announced %v: an Ingress change, which pushes the gateway", announced)
	}
	// Whatever rebuilds the index next keeps the translation.
	next := pushcontext.Build(store, pushcontext.Options{DomainSuffix: "cluster.local"}, pc, nil)
	if info := next.BuildInfo(); info.IngressesTranslated != 0 || info.IngressesReused != 1 {
		t.Errorf("the next build translated %d Ingresses and reused %d, want 0 and 1",
			info.IngressesTranslated, info.IngressesReused)
	}
}
