package controllers

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	k8snetworkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// checkIngressKindsConverge creates, updates and deletes Ingresses,
// IngressClasses, Secrets and a gateway Service's status through the API
// server and waits for the store to follow. TestKubeSourceAgainstAPIServer
// runs it against its running source.
func checkIngressKindsConverge(t *testing.T, ctx context.Context, kube kubernetes.Interface, store model.Store, ns string) {
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	classes := kube.NetworkingV1().IngressClasses()
	ingresses := kube.NetworkingV1().Ingresses(ns)
	secrets := kube.CoreV1().Secrets(ns)

	t.Run("ingress classes", func(t *testing.T) {
		must(classes.Create(ctx, &k8snetworkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "istio"},
			Spec: k8snetworkingv1.IngressClassSpec{Controller: model.IngressController}}, metav1.CreateOptions{}))
		must(classes.Create(ctx, &k8snetworkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "nginx"},
			Spec: k8snetworkingv1.IngressClassSpec{Controller: "k8s.io/ingress-nginx"}}, metav1.CreateOptions{}))
		classView := func() map[string]model.IngressClass {
			out := map[string]model.IngressClass{}
			for _, c := range store.IngressClasses() {
				out[c.Name] = *c
			}
			return out
		}
		eventually(t, "classes", func() bool {
			got := classView()
			return len(got) == 2 && got["istio"].Controller == model.IngressController && !got["istio"].IsDefault &&
				got["nginx"].Controller == "k8s.io/ingress-nginx"
		})
		istio, err := classes.Get(ctx, "istio", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		istio.Annotations = map[string]string{annotationDefaultIngressClass: "true"}
		must(classes.Update(ctx, istio, metav1.UpdateOptions{}))
		eventually(t, "class made default", func() bool { return classView()["istio"].IsDefault })
		if err := classes.Delete(ctx, "nginx", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "class deleted", func() bool { _, ok := classView()["nginx"]; return !ok })
	})

	t.Run("ingresses", func(t *testing.T) {
		key := model.NamespacedName{Namespace: ns, Name: "shop"}
		prefix := k8snetworkingv1.PathTypePrefix
		must(ingresses.Create(ctx, &k8snetworkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Name: "shop", Annotations: map[string]string{annotationIngressClass: "istio"}},
			Spec: k8snetworkingv1.IngressSpec{
				IngressClassName: ptr("istio"),
				TLS:              []k8snetworkingv1.IngressTLS{{Hosts: []string{"shop.example.com"}, SecretName: "shop-cert"}},
				Rules: []k8snetworkingv1.IngressRule{{Host: "shop.example.com", IngressRuleValue: k8snetworkingv1.IngressRuleValue{
					HTTP: &k8snetworkingv1.HTTPIngressRuleValue{Paths: []k8snetworkingv1.HTTPIngressPath{
						httpPath("/api", &prefix, serviceBackend("api", k8snetworkingv1.ServiceBackendPort{Name: "http"})),
					}},
				}}},
			},
		}, metav1.CreateOptions{}))
		eventually(t, "ingress", func() bool { return store.Ingress(key) != nil })
		got := store.Ingress(key)
		if got.ClassName != "istio" || got.ClassAnnotation == nil || *got.ClassAnnotation != "istio" || got.Revision == "" || got.Generation != 1 ||
			got.CreationTime.IsZero() || len(got.TLS) != 1 || got.TLS[0].SecretName != "shop-cert" ||
			got.Rules[0].Paths[0].Backend.PortName != "http" {
			t.Errorf("ingress = %+v", got)
		}

		cur, err := ingresses.Get(ctx, "shop", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.Rules[0].HTTP.Paths[0].Path = "/v2"
		must(ingresses.Update(ctx, cur, metav1.UpdateOptions{}))
		eventually(t, "path update", func() bool {
			ing := store.Ingress(key)
			return ing != nil && ing.Rules[0].Paths[0].Path == "/v2" && ing.Generation == 2
		})

		cur, err = ingresses.Get(ctx, "shop", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Status.LoadBalancer.Ingress = []k8snetworkingv1.IngressLoadBalancerIngress{{IP: "203.0.113.7"}}
		must(ingresses.UpdateStatus(ctx, cur, metav1.UpdateOptions{}))
		eventually(t, "status read back", func() bool {
			ing := store.Ingress(key)
			return ing != nil && len(ing.LoadBalancer) == 1 && ing.LoadBalancer[0].IP == "203.0.113.7"
		})

		if err := ingresses.Delete(ctx, "shop", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "ingress deleted", func() bool { return store.Ingress(key) == nil })
	})

	t.Run("tls secrets only", func(t *testing.T) {
		tlsKey := model.NamespacedName{Namespace: ns, Name: "shop-cert"}
		opaqueKey := model.NamespacedName{Namespace: ns, Name: "opaque-cert"}
		// Holds the TLS keys but is not of type kubernetes.io/tls. It is
		// created first: the watch delivers events in order, so once the
		// later TLS Secret has arrived, this one would have too.
		must(secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "opaque-cert"},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{"tls.crt": []byte("C"), "tls.key": []byte("K"), "cert": []byte("C")}},
			metav1.CreateOptions{}))
		must(secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "shop-cert"},
			Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": []byte("cert-1"), "tls.key": []byte("key-1"), "ca.crt": []byte("ca-1")}},
			metav1.CreateOptions{}))
		eventually(t, "tls secret", func() bool { return store.Secret(tlsKey) != nil })
		if got := store.Secret(tlsKey); string(got.Cert) != "cert-1" || string(got.PrivateKey) != "key-1" ||
			string(got.CACert) != "ca-1" || got.Type != string(corev1.SecretTypeTLS) {
			t.Errorf("secret = %+v", got)
		}
		if store.Secret(opaqueKey) != nil {
			t.Error("an Opaque Secret was picked up by the kubernetes source")
		}

		cur, err := secrets.Get(ctx, "shop-cert", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Data["tls.crt"], cur.Data["tls.key"] = []byte("cert-2"), []byte("key-2")
		must(secrets.Update(ctx, cur, metav1.UpdateOptions{}))
		eventually(t, "rotation", func() bool {
			s := store.Secret(tlsKey)
			return s != nil && string(s.Cert) == "cert-2" && string(s.PrivateKey) == "key-2"
		})

		if err := secrets.Delete(ctx, "shop-cert", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "secret deleted", func() bool { return store.Secret(tlsKey) == nil })
		if store.Secret(opaqueKey) != nil {
			t.Error("an Opaque Secret was picked up by the kubernetes source")
		}
	})

	t.Run("gateway service addresses", func(t *testing.T) {
		key := model.NamespacedName{Namespace: ns, Name: "ingressgateway"}
		svc, err := kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "ingressgateway"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalIPs: []string{"198.51.100.9"},
				Ports: []corev1.ServicePort{{Name: "http2", Port: 80}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "external IPs", func() bool {
			s := store.Service(key)
			return s != nil && len(s.ExternalIPs) == 1 && s.ExternalIPs[0] == "198.51.100.9" && len(s.LoadBalancer) == 0
		})
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.9"}, {Hostname: "gw.example.net"}}
		must(kube.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}))
		eventually(t, "load balancer status", func() bool {
			s := store.Service(key)
			return s != nil && len(s.LoadBalancer) == 2 && s.LoadBalancer[0].IP == "203.0.113.9" &&
				s.LoadBalancer[1].Hostname == "gw.example.net"
		})
		if err := kube.CoreV1().Services(ns).Delete(ctx, "ingressgateway", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "gateway service deleted", func() bool { return store.Service(key) == nil })
	})
}
