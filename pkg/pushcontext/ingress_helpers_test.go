package pushcontext

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/testcerts"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// ingressClass is ours unless controller says otherwise.
func ingressClass(name, controller string, isDefault bool) *model.IngressClass {
	return &model.IngressClass{Name: name, Controller: controller, IsDefault: isDefault}
}

// ing makes an Ingress of class "istio" (an IngressClass the fixtures
// create); age orders Ingresses (0 is oldest).
func ing(ns, name string, age int, rules ...model.IngressRule) *model.Ingress {
	return &model.Ingress{
		Namespace:    ns,
		Name:         name,
		ClassName:    "istio",
		CreationTime: epoch.Add(time.Duration(age) * time.Minute),
		Rules:        rules,
	}
}

func rule(host string, paths ...model.IngressPath) model.IngressRule {
	return model.IngressRule{Host: host, Paths: paths}
}

func path(pathType model.PathType, p string, backend model.IngressBackend) model.IngressPath {
	return model.IngressPath{Path: p, PathType: pathType, Backend: backend}
}

func toPort(svc string, port uint32) model.IngressBackend {
	return model.IngressBackend{ServiceName: svc, PortNumber: port}
}

func toNamedPort(svc, port string) model.IngressBackend {
	return model.IngressBackend{ServiceName: svc, PortName: port}
}

func withDefault(i *model.Ingress, b model.IngressBackend) *model.Ingress {
	i.DefaultBackend = &b
	return i
}

func withTLS(i *model.Ingress, secret string, hosts ...string) *model.Ingress {
	i.TLS = append(i.TLS, model.IngressTLS{Hosts: hosts, SecretName: secret})
	return i
}

// withClass sets the class name and, unless annotation is "", the legacy
// class annotation.
func withClass(i *model.Ingress, class, annotation string) *model.Ingress {
	i.ClassName = class
	if annotation != "" {
		i.ClassAnnotation = &annotation
	}
	return i
}

// gatewayService is istio-system/istio-ingressgateway with port 80 to 8080
// and port 443 to 8443.
func gatewayService() *model.Service {
	return &model.Service{
		Name:      "istio-ingressgateway",
		Namespace: "istio-system",
		Hostname:  hostname("istio-system", "istio-ingressgateway"),
		Ports: []*model.Port{
			{Name: "http2", Port: 80, Protocol: model.ProtocolHTTP2, TargetPort: 8080},
			{Name: "https", Port: 443, Protocol: model.ProtocolHTTPS, TargetPort: 8443},
		},
	}
}

// testCert is a self-signed ECDSA certificate and its key, in PEM, made
// fresh for the test run: no private key is ever committed.
type testCert struct{ cert, key []byte }

func newTestCert(t testing.TB, cn string) testCert {
	t.Helper()
	var c testCert
	c.cert, c.key = testcerts.SelfSigned(t, cn)
	return c
}

func tlsSecret(ns, name string, c testCert) *model.Secret {
	return &model.Secret{Namespace: ns, Name: name, Type: "kubernetes.io/tls", Cert: c.cert, PrivateKey: c.key}
}

// describeGateway renders what the gateway serves, one line per route and
// TLS host, so tests can state expectations compactly:
//
//	<host> <pathType> <path> -> <cluster> (<ingress>)
//	tls <hosts,...> <sds name> (<ingress>)
//	ports <http> <https>
func describeGateway(g *IngressGateway) []string {
	if g == nil {
		return nil
	}
	out := []string{"ports " + strconv.Itoa(int(g.HTTPPort)) + " " + strconv.Itoa(int(g.HTTPSPort))}
	for _, vh := range g.HTTP {
		for _, r := range vh.Routes {
			out = append(out, vh.Host+" "+string(r.PathType)+" "+r.Path+" -> "+r.Cluster+" ("+r.From.String()+")")
		}
	}
	for _, h := range g.TLS {
		out = append(out, "tls "+strings.Join(h.Hosts, ",")+" "+h.SecretName+" ("+h.From.String()+")")
	}
	return out
}

// cluster is the cluster name for a test service (newService ports).
func cluster(ns, svc string, port int) string {
	return "outbound|" + strconv.Itoa(port) + "||" + hostname(ns, svc)
}
