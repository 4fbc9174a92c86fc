package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/internal/xdstest"
)

// TestEnvoySidecarKubernetes and TestEnvoySidecarConfigDir connect as an
// Envoy sidecar (no proxyless GENERATOR) running in a Pod of the mesh and
// check the whole configuration it is served: outbound and inbound
// clusters with the DestinationRule applied, the virtual listeners, per-port
// listeners with a tunnel, routes, and endpoints. Every resource must pass
// ValidateAll, including what is packed inside Any fields.
func TestEnvoySidecarKubernetes(t *testing.T) {
	t.Parallel()
	runEnvoySidecar(t, newKubeMesh(t), "envoy-kube")
}

func TestEnvoySidecarConfigDir(t *testing.T) { runEnvoySidecar(t, newDirMesh(t), "envoy-dir") }

func runEnvoySidecar(t *testing.T, m mesh, ns string) {
	fx := fixtures{NS: ns}
	m.apply(t, "namespace", fx.render(namespaceYAML))
	m.apply(t, "sidecar-world", fx.render(sidecarWorldYAML))
	if km, ok := m.(*kubeMesh); ok {
		// kubectl apply ignores status; the kubelet would set the Pod IP.
		km.run(t, "", "patch", "pod", "web-0", "-n", ns, "--subresource=status", "--type=merge",
			"-p", `{"status":{"phase":"Running","podIP":"10.244.0.5","podIPs":[{"ip":"10.244.0.5"}]}}`)
	}
	cp := startControlPlane(t, m)
	node := sidecarNode(ns)
	web := fmt.Sprintf("web.%s.svc.cluster.local", ns)
	db := fmt.Sprintf("db.%s.svc.cluster.local", ns)

	var clusters map[string]*clusterv3.Cluster
	waitFor(t, 30*time.Second, "the sidecar's clusters", func() error {
		clusters = clustersOf(t, fetchAs(t, cp, node, clusterType))
		want := []string{
			"outbound|8080||" + web, "outbound|8080|v1|" + web, "outbound|5432||" + db,
			"inbound|8080||", "PassthroughCluster", "BlackHoleCluster",
		}
		for _, name := range want {
			if clusters[name] == nil {
				return fmt.Errorf("no cluster %s in %v", name, keys(clusters))
			}
		}
		return nil
	})
	validateAll(t, clusters)
	if ts := clusters["outbound|8080||"+web].GetTransportSocket(); ts == nil || !strings.Contains(ts.GetTypedConfig().GetTypeUrl(), "UpstreamTlsContext") {
		t.Errorf("web's ISTIO_MUTUAL rule gave no TLS transport socket: %v", ts)
	}
	if got := clusters["outbound|8080|v1|"+web].GetLbPolicy(); got != clusterv3.Cluster_RING_HASH {
		t.Errorf("subset v1 lb policy %v, want the subset's RING_HASH", got)
	}
	if got := clusters["outbound|8080||"+web].GetCircuitBreakers().GetThresholds(); len(got) == 0 || got[0].GetMaxConnections().GetValue() != 100 {
		t.Errorf("connectionPool.tcp.maxConnections not applied: %v", got)
	}

	listeners := listenersOf(t, fetchAs(t, cp, node, resourcev3.ListenerType))
	validateAll(t, listeners)
	for _, name := range []string{"virtualOutbound", "virtualInbound", "0.0.0.0_8080", "10.0.0.60_5432"} {
		if listeners[name] == nil {
			t.Fatalf("no listener %s in %v", name, keys(listeners))
		}
	}
	if got := tunnelHostname(t, listeners["10.0.0.60_5432"]); got != "db.internal:15009" {
		t.Errorf("db listener tunnels to %q, want the rule's targetHost:targetPort", got)
	}

	routes := fetchAs(t, cp, node, resourcev3.RouteType, "8080")
	rc := &routev3.RouteConfiguration{}
	if len(routes.GetResources()) != 1 || routes.GetResources()[0].UnmarshalTo(rc) != nil {
		t.Fatalf("route 8080: %v", routes.GetResources())
	}
	if err := xdstest.ValidateDeep(rc); err != nil {
		t.Errorf("route 8080: %v", err)
	}
	if !hasDomain(rc, web) || !hasDomain(rc, "web") {
		t.Errorf("route 8080 lacks web's FQDN or same-namespace short name: %v", rc.GetVirtualHosts())
	}
	if !rc.GetIgnorePortInHostMatching() {
		t.Error("route 8080 matches the Host header's port; its domains list none")
	}

	clas := loadAssignmentsOf(t, fetchAs(t, cp, node, endpointType, "outbound|8080||"+web, "outbound|8080|v1|"+web))
	if n := endpointCount(clas["outbound|8080||"+web]); n != 2 {
		t.Errorf("web has %d endpoints, want 2", n)
	}
	if n := endpointCount(clas["outbound|8080|v1|"+web]); n != 1 {
		t.Errorf("subset v1 has %d endpoints, want web-0's only", n)
	}
	// An Envoy accepts all of it (no NACK) and ends fully warm.
	requireEnvoyWarm(t, cp, node, func(s xdstest.Snapshot) error {
		for _, name := range []string{"outbound|8080||" + web, "outbound|5432||" + db, "inbound|8080||"} {
			if s.Clusters[name] == nil {
				return fmt.Errorf("no active cluster %s", name)
			}
		}
		if s.Listeners["virtualOutbound"] == nil || s.Routes["8080"] == nil {
			return fmt.Errorf("no active virtualOutbound listener or route 8080")
		}
		return nil
	})
}

// requireEnvoyWarm follows node's configuration with an Envoy-semantics
// client of each mode, and fails the test unless each ends fully warm,
// with nothing dangling, cond holding and no NACK sent.
func requireEnvoyWarm(t *testing.T, cp *controlPlane, node *corev3.Node, cond func(xdstest.Snapshot) error) {
	t.Helper()
	for _, mode := range []xdstest.Mode{xdstest.SotW, xdstest.Delta} {
		c := xdstest.DialEnvoyClient(t, cp.xdsAddr, node, mode)
		c.RequireWarm(warmBound, cond)
		c.Close()
	}
}

// requireEnvoyWarmOn is requireEnvoyWarm over conn, for a proxy that must
// prove its identity (15012) to be served its Secrets.
func requireEnvoyWarmOn(t *testing.T, conn grpc.ClientConnInterface, node *corev3.Node, cond func(xdstest.Snapshot) error) {
	t.Helper()
	for _, mode := range []xdstest.Mode{xdstest.SotW, xdstest.Delta} {
		c := xdstest.NewEnvoyClient(t, conn, node, mode)
		c.RequireWarm(warmBound, cond)
		c.Close()
	}
}

func sidecarNode(ns string) *corev3.Node {
	meta, _ := structpb.NewStruct(map[string]any{
		"NAMESPACE": ns, "INSTANCE_IPS": "10.244.0.5", "LABELS": map[string]any{"app": "web", "version": "v1"},
	})
	return &corev3.Node{Id: nodeID("10.244.0.5", "web-0", ns), Metadata: meta}
}

func listenersOf(t *testing.T, resp *discoveryv3.DiscoveryResponse) map[string]*listenerv3.Listener {
	t.Helper()
	out := map[string]*listenerv3.Listener{}
	for _, a := range resp.GetResources() {
		l := &listenerv3.Listener{}
		if err := a.UnmarshalTo(l); err != nil {
			t.Fatal(err)
		}
		out[l.GetName()] = l
	}
	return out
}

func validateAll[M proto.Message](t *testing.T, resources map[string]M) {
	t.Helper()
	names := keys(resources)
	slices.Sort(names)
	for _, name := range names {
		if err := xdstest.ValidateDeep(resources[name]); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// tunnelHostname is the CONNECT authority of the listener's tcp_proxy.
func tunnelHostname(t *testing.T, l *listenerv3.Listener) string {
	t.Helper()
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			tp := &tcpproxyv3.TcpProxy{}
			if f.GetTypedConfig().UnmarshalTo(tp) == nil {
				return tp.GetTunnelingConfig().GetHostname()
			}
		}
	}
	return ""
}

func hasDomain(rc *routev3.RouteConfiguration, domain string) bool {
	for _, vh := range rc.GetVirtualHosts() {
		if slices.Contains(vh.GetDomains(), domain) {
			return true
		}
	}
	return false
}

const sidecarWorldYAML = `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: {{.NS}}}
spec:
  clusterIP: 10.0.0.50
  selector: {app: web}
  ports: [{name: http, port: 8080, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: {{.NS}}}
spec:
  clusterIP: 10.0.0.60
  selector: {app: db}
  ports: [{name: tcp, port: 5432, targetPort: 5432}]
---
apiVersion: v1
kind: Pod
metadata:
  name: web-0
  namespace: {{.NS}}
  labels: {app: web, version: v1}
spec:
  containers: [{name: web, image: example/web}]
status:
  phase: Running
  podIP: 10.244.0.5
  podIPs: [{ip: 10.244.0.5}]
---
apiVersion: v1
kind: Pod
metadata:
  name: web-1
  namespace: {{.NS}}
  labels: {app: web, version: v2}
spec:
  containers: [{name: web, image: example/web}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web
  namespace: {{.NS}}
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- addresses: ["10.244.0.5"]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: web-0, namespace: {{.NS}}}
- addresses: ["10.244.0.6"]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: web-1, namespace: {{.NS}}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: db
  namespace: {{.NS}}
  labels: {kubernetes.io/service-name: db}
addressType: IPv4
ports: [{name: tcp, port: 5432}]
endpoints:
- addresses: ["10.244.0.9"]
  conditions: {ready: true}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web, namespace: {{.NS}}}
spec:
  host: web.{{.NS}}.svc.cluster.local
  trafficPolicy:
    tls: {mode: ISTIO_MUTUAL}
    connectionPool:
      tcp: {maxConnections: 100}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy:
      loadBalancer:
        consistentHash: {httpHeaderName: x-user}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: db, namespace: {{.NS}}}
spec:
  host: db.{{.NS}}.svc.cluster.local
  trafficPolicy:
    tunnel: {protocol: CONNECT, targetHost: db.internal, targetPort: 15009}
`
