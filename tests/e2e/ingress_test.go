package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/internal/testcerts"
	"github.com/meshpilot/meshpilot/internal/xdstest"
)

// TestIngressGateway applies an IngressClass, a gateway Service, a backend,
// a TLS Secret and an Ingress with kubectl, then checks what an ingress
// gateway (a router-mode xDS client) receives and the status written back
// to the Ingress. A second control plane then takes over the status writing
// when the first one stops.
func TestIngressGateway(t *testing.T) {
	t.Parallel()
	m := newKubeMesh(t)
	ns := "shop"
	fx := ingressFixtures{NS: ns, LBIP: "198.51.100.7"}
	certPEM, keyPEM := testcerts.SelfSigned(t, "web.example.com")
	fx.Cert, fx.Key = string(certPEM), string(keyPEM)
	m.apply(t, "world", fx.render(t, ingressWorldYAML))
	m.setGatewayStatus(t, `{"status":{"loadBalancer":{"ingress":[{"ip":"198.51.100.7"}]}}}`)

	first := startControlPlane(t, m, withIdentity("pilot-a"))
	node := gatewayNode()
	web := "web.shop.svc.cluster.local"

	t.Run("the gateway gets listeners for the Service's target ports", func(t *testing.T) {
		waitFor(t, 30*time.Second, "gateway listeners", func() error {
			listeners := listenersOf(t, fetchAs(t, first, node, resourcev3.ListenerType))
			for _, name := range []string{"0.0.0.0_8080", "0.0.0.0_8443"} {
				if listeners[name] == nil {
					return fmt.Errorf("no %s in %v", name, keys(listeners))
				}
			}
			validateAll(t, listeners)
			return nil
		})
	})

	t.Run("routes follow the paths, most specific first", func(t *testing.T) {
		resp := fetchAs(t, first, node, resourcev3.RouteType, "http.8080")
		rc := &routev3.RouteConfiguration{}
		if len(resp.GetResources()) != 1 || resp.GetResources()[0].UnmarshalTo(rc) != nil {
			t.Fatalf("route http.8080: %v", resp.GetResources())
		}
		if err := xdstest.ValidateDeep(rc); err != nil {
			t.Fatal(err)
		}
		var vh *routev3.VirtualHost
		for _, v := range rc.GetVirtualHosts() {
			if slices.Contains(v.GetDomains(), "web.example.com") {
				vh = v
			}
		}
		if vh == nil {
			t.Fatalf("no virtual host for web.example.com: %v", rc.GetVirtualHosts())
		}
		var got []string
		for _, r := range vh.GetRoutes() {
			got = append(got, r.GetMatch().GetPath()+r.GetMatch().GetPathSeparatedPrefix()+r.GetMatch().GetPrefix()+" -> "+r.GetRoute().GetCluster())
		}
		want := []string{"/api/v1/login -> outbound|8080||" + web, "/api/v1 -> outbound|8080||" + web, "/ -> outbound|9090||" + web}
		if !slices.Equal(got, want) {
			t.Errorf("routes of web.example.com:\n got %v\nwant %v", got, want)
		}
	})

	t.Run("clusters and endpoints of the backends", func(t *testing.T) {
		clusters := clustersOf(t, fetchAs(t, first, node, clusterType))
		for _, name := range []string{"outbound|8080||" + web, "outbound|9090||" + web} {
			if clusters[name] == nil {
				t.Errorf("no cluster %s", name)
			}
		}
		clas := loadAssignmentsOf(t, fetchAs(t, first, node, endpointType, "outbound|8080||"+web))
		if n := endpointCount(clas["outbound|8080||"+web]); n != 1 {
			t.Errorf("web has %d endpoints, want 1", n)
		}
	})

	// The gateway proves its identity on 15012, as Istio's agent does;
	// only there does it get private keys.
	gatewayConn := identityConn(t, m, first, "istio-system", "istio-ingressgateway")

	t.Run("no private key over plaintext 15010", func(t *testing.T) {
		resp := fetchAs(t, first, node, resourcev3.SecretType, "kubernetes://shop/web-tls")
		if n := len(resp.GetResources()); n != 0 {
			t.Fatalf("plaintext SDS returned %d secrets, want none", n)
		}
	})

	t.Run("the certificate comes by SDS to the proven gateway", func(t *testing.T) {
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(gatewayConn).StreamAggregatedResources(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		resp := fetchOn(t, stream, node, resourcev3.SecretType, "kubernetes://shop/web-tls")
		if len(resp.GetResources()) != 1 {
			t.Fatalf("SDS returned %d secrets", len(resp.GetResources()))
		}
		secret := &tlsv3.Secret{}
		if err := resp.GetResources()[0].UnmarshalTo(secret); err != nil {
			t.Fatal(err)
		}
		if got := string(secret.GetTlsCertificate().GetCertificateChain().GetInlineBytes()); got != fx.Cert {
			t.Errorf("served certificate differs from the Secret's")
		}
		if err := xdstest.ValidateDeep(secret); err != nil {
			t.Error(err)
		}
	})

	t.Run("an Envoy gateway accepts it all and ends fully warm", func(t *testing.T) {
		requireEnvoyWarmOn(t, gatewayConn, node, func(s xdstest.Snapshot) error {
			if s.Listeners["0.0.0.0_8443"] == nil || s.Secrets["kubernetes://shop/web-tls"] == nil {
				return fmt.Errorf("no active HTTPS listener with its certificate")
			}
			return nil
		})
	})

	t.Run("status carries the gateway's address", func(t *testing.T) {
		waitFor(t, 30*time.Second, "Ingress status", func() error {
			return m.expectIngressStatus(t, ns, "web", "198.51.100.7")
		})
	})

	t.Run("another replica takes over status on handover", func(t *testing.T) {
		second := startControlPlane(t, m, withIdentity("pilot-b"))
		_ = second
		first.stop(t)
		m.setGatewayStatus(t, `{"status":{"loadBalancer":{"ingress":[{"hostname":"lb.example.com"}]}}}`)
		waitFor(t, 60*time.Second, "status from the new leader", func() error {
			return m.expectIngressStatus(t, ns, "web", "lb.example.com")
		})
	})
}

func gatewayNode() *corev3.Node {
	meta, _ := structpb.NewStruct(map[string]any{
		"NAMESPACE": "istio-system", "LABELS": map[string]any{"istio": "ingressgateway"},
	})
	return &corev3.Node{Id: "router~10.244.0.20~gateway-0.istio-system~istio-system.svc.cluster.local", Metadata: meta}
}

func (m *kubeMesh) setGatewayStatus(t *testing.T, patch string) {
	t.Helper()
	m.run(t, "", "patch", "service", "istio-ingressgateway", "-n", "istio-system", "--subresource=status", "--type=merge", "-p", patch)
}

// expectIngressStatus checks the Ingress's status.loadBalancer.ingress holds
// exactly one entry with addr as its IP or hostname.
func (m *kubeMesh) expectIngressStatus(t *testing.T, ns, name, addr string) error {
	t.Helper()
	out, err := m.command("get", "ingress", name, "-n", ns,
		"-o", "jsonpath={.status.loadBalancer.ingress}").CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl get ingress: %v: %s", err, out)
	}
	var entries []struct {
		IP       string `json:"ip"`
		Hostname string `json:"hostname"`
	}
	if len(out) > 0 {
		if err := json.Unmarshal(out, &entries); err != nil {
			return fmt.Errorf("status %s: %v", out, err)
		}
	}
	if len(entries) != 1 || (entries[0].IP != addr && entries[0].Hostname != addr) {
		return fmt.Errorf("status.loadBalancer.ingress = %s, want %s", out, addr)
	}
	return nil
}

type ingressFixtures struct {
	NS, LBIP  string
	Cert, Key string
}

func (f ingressFixtures) render(t *testing.T, tmpl string) string {
	t.Helper()
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	r := strings.NewReplacer("{{.NS}}", f.NS, "{{.CertB64}}", b64(f.Cert), "{{.KeyB64}}", b64(f.Key))
	return r.Replace(tmpl)
}

const ingressWorldYAML = `
apiVersion: v1
kind: Namespace
metadata: {name: istio-system}
---
apiVersion: v1
kind: Namespace
metadata: {name: {{.NS}}}
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: istio}
spec: {controller: istio.io/ingress-controller}
---
apiVersion: v1
kind: Service
metadata: {name: istio-ingressgateway, namespace: istio-system}
spec:
  type: LoadBalancer
  selector: {istio: ingressgateway}
  ports:
  - {name: http2, port: 80, targetPort: 8080}
  - {name: https, port: 443, targetPort: 8443}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: {{.NS}}}
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 8080, targetPort: 8080}
  - {name: http-admin, port: 9090, targetPort: 9090}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web
  namespace: {{.NS}}
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8080}, {name: http-admin, port: 9090}]
endpoints:
- addresses: ["10.244.1.5"]
  conditions: {ready: true}
---
apiVersion: v1
kind: Secret
metadata: {name: web-tls, namespace: {{.NS}}}
type: kubernetes.io/tls
data:
  tls.crt: {{.CertB64}}
  tls.key: {{.KeyB64}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: {{.NS}}}
spec:
  ingressClassName: istio
  tls:
  - hosts: [web.example.com]
    secretName: web-tls
  rules:
  - host: web.example.com
    http:
      paths:
      - {path: /api/v1, pathType: Prefix, backend: {service: {name: web, port: {name: http}}}}
      - {path: /api/v1/login, pathType: Exact, backend: {service: {name: web, port: {number: 8080}}}}
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 9090}}}}
`
