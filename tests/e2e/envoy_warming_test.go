package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/meshpilot/meshpilot/internal/xdstest"
)

// warmBound is how long a proxy may take to become fully warm after a
// change. It bounds a broken control plane; it does not measure speed.
const warmBound = 20 * time.Second

// TestEnvoyWarmsAfterLoadBalancerChange changes a DestinationRule's load
// balancer through the API server while Envoy-semantics clients (SotW and
// delta) follow the sidecar's configuration. Envoy uses a changed EDS
// cluster only once it receives that cluster's ClusterLoadAssignment after
// the change ("Resource warming",
// https://www.envoyproxy.io/docs/envoy/latest/api-docs/xds_protocol), so
// each client must end fully warm with the new policy, not stuck warming
// with the old one still serving.
func TestEnvoyWarmsAfterLoadBalancerChange(t *testing.T) {
	m := newKubeMesh(t)
	fx := fixtures{NS: "warming"}
	m.apply(t, "namespace", fx.render(namespaceYAML))
	m.apply(t, "echo", fx.render(warmingServiceYAML))
	m.apply(t, "rule", fx.render(lbRuleYAML("ROUND_ROBIN")))
	cp := startControlPlane(t, m)

	echo := "outbound|8080||echo.warming.svc.cluster.local"
	policy := func(want clusterv3.Cluster_LbPolicy) func(xdstest.Snapshot) error {
		return func(s xdstest.Snapshot) error {
			c := s.Clusters[echo]
			if c == nil {
				return fmt.Errorf("no active cluster %s", echo)
			}
			if c.GetLbPolicy() != want {
				return fmt.Errorf("cluster %s serves with %v, want %v", echo, c.GetLbPolicy(), want)
			}
			if n := endpointCount(s.Endpoints[echo]); n != 1 {
				return fmt.Errorf("cluster %s has %d endpoints, want 1", echo, n)
			}
			return nil
		}
	}

	modes := []xdstest.Mode{xdstest.SotW, xdstest.Delta}
	clients := map[xdstest.Mode]*xdstest.EnvoyClient{}
	for _, mode := range modes {
		clients[mode] = xdstest.DialEnvoyClient(t, cp.xdsAddr, sidecarNode(fx.NS), mode)
		clients[mode].RequireWarm(warmBound, policy(clusterv3.Cluster_ROUND_ROBIN))
	}

	m.apply(t, "rule", fx.render(lbRuleYAML("LEAST_REQUEST")))
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			c := clients[mode]
			if err := c.WaitFor(warmBound, policy(clusterv3.Cluster_LEAST_REQUEST)); err != nil {
				t.Fatalf("after the load balancer change: %v\nrequests:\n%s", err, requestLog(c))
			}
			if n := c.Nacks(); len(n) != 0 {
				t.Errorf("NACKs: %v", n)
			}
		})
	}
}

// requestLog lists what a client sent, one request a line.
func requestLog(c *xdstest.EnvoyClient) string {
	var b strings.Builder
	for _, r := range c.Requests() {
		fmt.Fprintf(&b, "  %v\n", r)
	}
	return b.String()
}

const warmingServiceYAML = `
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: {{.NS}}}
spec:
  clusterIP: 10.0.0.80
  selector: {app: echo}
  ports: [{name: http, port: 8080, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo
  namespace: {{.NS}}
  labels: {kubernetes.io/service-name: echo}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- addresses: ["10.244.0.30"]
  conditions: {ready: true}
`

func lbRuleYAML(simple string) string {
	return `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: {{.NS}}}
spec:
  host: echo.{{.NS}}.svc.cluster.local
  trafficPolicy:
    loadBalancer: {simple: ` + simple + `}
`
}
