package pushcontext

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshpilot/meshpilot/internal/xdstest"
)

// TestIngressFromYAML runs plain Kubernetes objects through the real
// ingester, as the sources do, and checks what the gateway serves.
func TestIngressFromYAML(t *testing.T) {
	cert := newTestCert(t, "shop.example.com")
	yaml := `
apiVersion: v1
kind: Service
metadata: {name: istio-ingressgateway, namespace: istio-system}
spec:
  ports:
  - {name: http2, port: 80, targetPort: 8080}
  - {name: https, port: 443, targetPort: 8443}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  ports:
  - {name: http, port: 8000, targetPort: 80}
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: istio}
spec: {controller: istio.io/ingress-controller}
---
apiVersion: v1
kind: Secret
metadata: {name: shop-cert, namespace: shop}
type: kubernetes.io/tls
data:
  tls.crt: ` + base64.StdEncoding.EncodeToString(cert.cert) + `
  tls.key: ` + base64.StdEncoding.EncodeToString(cert.key) + `
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: shop, namespace: shop, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  ingressClassName: istio
  defaultBackend:
    service: {name: web, port: {number: 8000}}
  tls:
  - {hosts: [shop.example.com], secretName: shop-cert}
  - {hosts: [other.example.com], secretName: missing}
  rules:
  - host: shop.example.com
    http:
      paths:
      - {path: /cart, pathType: Prefix, backend: {service: {name: web, port: {name: http}}}}
      - {path: /cart/checkout, pathType: Exact, backend: {service: {name: web, port: {number: 8000}}}}
      - {path: /cart, pathType: Exact, backend: {service: {name: nope, port: {number: 80}}}}
`
	pc := Build(xdstest.Store(t, yaml), testOpts, nil, nil)
	web := "outbound|8000||" + hostname("shop", "web")
	want := []string{"ports 8080 8443",
		"shop.example.com Exact /cart/checkout -> " + web + " (shop/shop)",
		"shop.example.com Prefix /cart -> " + web + " (shop/shop)",
		"shop.example.com Prefix / -> " + web + " (shop/shop)",
		"* Prefix / -> " + web + " (shop/shop)",
		"tls shop.example.com kubernetes://shop/shop-cert (shop/shop)",
	}
	if diff := cmp.Diff(want, describeGateway(pc.IngressGateway())); diff != "" {
		t.Errorf("gateway (-want +got):\n%s", diff)
	}
	wantProblems := map[string][]string{"shop/shop": {
		"TLS for hosts other.example.com: secret shop/missing not found; TLS entry dropped",
		`host "shop.example.com" path "/cart": backend service shop/nope not found; dropped`,
	}}
	if diff := cmp.Diff(wantProblems, problemsByName(pc.IngressProblems())); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	if sec := pc.Secret(pc.IngressGateway().TLS[0].Secret); sec == nil || !strings.Contains(string(sec.Cert), "CERTIFICATE") {
		t.Errorf("Secret() = %v, want the converted TLS Secret", sec)
	}
}
