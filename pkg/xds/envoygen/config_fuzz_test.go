package envoygen

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// fuzzWorld is what the fuzzed document lands in: a service with two
// versions of sidecar-injected pods (so subsets and auto mTLS have
// endpoints), a gRPC service, and the ingress gateway with its class.
const fuzzWorld = gatewayWorld + `
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: app}
spec:
  clusterIP: 10.96.10.2
  ports: [{name: grpc, port: 7070, targetPort: 17070}]
  selector: {app: echo}
---
apiVersion: v1
kind: Pod
metadata: {name: web-v1, namespace: app, labels: {app: web, version: v1, security.istio.io/tlsMode: istio, topology.kubernetes.io/region: r1}}
spec: {nodeName: n1, containers: [{name: app, image: app}]}
status: {phase: Running, podIP: 10.1.0.1, podIPs: [{ip: 10.1.0.1}]}
---
apiVersion: v1
kind: Pod
metadata: {name: web-v2, namespace: app, labels: {app: web, version: v2, topology.kubernetes.io/region: r2}}
spec: {nodeName: n2, containers: [{name: app, image: app}]}
status: {phase: Running, podIP: 10.1.0.2, podIPs: [{ip: 10.1.0.2}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: app, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
  - {addresses: [10.1.0.1], zone: r1-a, targetRef: {kind: Pod, name: web-v1, namespace: app}}
  - {addresses: [10.1.0.2], zone: r2-a, targetRef: {kind: Pod, name: web-v2, namespace: app}}
`

var configKinds = regexp.MustCompile(`(?m)^kind: (DestinationRule|Ingress|PeerAuthentication)\s*$`)

// FuzzConfigToEnvoy takes one document (a DestinationRule, Ingress or
// PeerAuthentication as the seeds have it, then whatever mutation makes of
// it) through the whole path the sources take: the file decoder, the
// ingester's validation and conversion, the push context's translation
// (the Ingress index and merge, rule resolution) and the Envoy generators,
// for a sidecar and for the ingress gateway. Whatever the document, what
// is accepted must come out as configuration Envoy accepts: every resource
// passes Envoy's own validation (deep inside Anys), names match, and a
// second generation from the caches gives the same resources. Documents
// that are refused are refused with an error, never a panic.
func FuzzConfigToEnvoy(f *testing.F) {
	files, err := filepath.Glob("testdata/*/*.in.yaml")
	if err != nil {
		f.Fatal(err)
	}
	example, err := filepath.Glob("../../../examples/mesh/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	seeds := 0
	for _, file := range append(files, example...) {
		raw, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, doc := range docSeparator.Split(string(raw), -1) {
			if configKinds.MatchString(doc) {
				f.Add([]byte(doc))
				seeds++
			}
		}
	}
	if seeds < 20 {
		f.Fatalf("%d seed documents; the golden inputs moved", seeds)
	}
	sidecar := &model.Proxy{ID: "sidecar~10.1.0.9~client.app~app.svc.cluster.local", Type: model.SidecarProxy,
		IPAddresses: []string{"10.1.0.9"}, Namespace: "app", Labels: map[string]string{"app": "client"},
		VerifiedIdentity: verified("app", "client")}
	gateway := gatewayProxy(ingressGatewayLabels)
	f.Fuzz(func(t *testing.T, doc []byte) {
		store, _ := xdstest.StoreAllowingErrors(t, fuzzWorld+"\n---\n"+string(doc))
		push := pushcontext.Build(store, gatewayTestPushOptions(), nil, nil)
		gens := New(Options{}).ByTypeURL()
		for _, proxy := range []*model.Proxy{sidecar, gateway} {
			for _, typeURL := range []string{ClusterType, EndpointType, ListenerType, RouteType} {
				w := &model.WatchedResource{TypeURL: typeURL, Wildcard: true}
				checkResources(t, w, generateTwice(t, gens[typeURL], proxy, push, w))
			}
		}
		if t.Failed() {
			t.Logf("document:\n%s", strings.TrimSpace(string(doc)))
		}
	})
}
