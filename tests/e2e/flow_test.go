package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestGRPCFlowKubernetes runs the flow with config applied by kubectl to a
// real API server.
func TestGRPCFlowKubernetes(t *testing.T) {
	t.Parallel()
	runGRPCFlow(t, newKubeMesh(t), "kube-flow")
}

// TestGRPCFlowConfigDir runs the same flow from a watched YAML directory.
func TestGRPCFlowConfigDir(t *testing.T) {
	m := newDirMesh(t)
	// A file that is not YAML sits next to good config from the start.
	m.apply(t, "broken", "apiVersion: v1\nkind: Service\nmetadata: [unclosed\n")
	runGRPCFlow(t, m, "dir-flow")
}

// runGRPCFlow routes real RPCs through meshpilot while endpoints and rules
// change: one backend, then two (round robin), then the other one only, then
// a DestinationRule, then a VirtualService that picks one of its subsets.
// No step may cause a NACK, and an invalid rule or route applied alongside
// never disturbs valid config.
func runGRPCFlow(t *testing.T, m mesh, ns string) {
	ip := hostIP(t)
	host := fmt.Sprintf("echo.%s.svc.cluster.local", ns)
	fx := fixtures{NS: ns, IP: ip, Host: host}

	m.apply(t, "namespace", fx.render(namespaceYAML))
	m.apply(t, "invalid-rule", fx.render(invalidRuleYAML))
	cp := startControlPlane(t, m)

	a := startBackend(t, cp, ip, ns, "echo-a", map[string]string{"app": "echo", "version": "v1"})
	b := startBackend(t, cp, ip, ns, "echo-b", map[string]string{"app": "echo", "version": "v2"})
	fx.PortA, fx.PortB = a.port, b.port

	m.apply(t, "service", fx.render(serviceYAML))
	m.apply(t, "slice-a", fx.render(sliceYAML, "echo-a", a.port))
	c := newClient(t, cp, ip, ns, "xds:///"+host+":7070")

	t.Run("one backend serves", func(t *testing.T) {
		waitFor(t, 30*time.Second, "an RPC through xDS", func() error {
			got, err := c.call()
			if err != nil {
				return err
			}
			if got != "echo-a" {
				return fmt.Errorf("answered by %q, want echo-a", got)
			}
			return nil
		})
	})

	t.Run("a second backend joins the round robin", func(t *testing.T) {
		m.apply(t, "slice-b", fx.render(sliceYAML, "echo-b", b.port))
		waitFor(t, 30*time.Second, "both backends to answer", func() error {
			seen, err := c.callN(20)
			if err != nil {
				return err
			}
			if seen["echo-a"] < 5 || seen["echo-b"] < 5 {
				return fmt.Errorf("answers by backend: %v", seen)
			}
			return nil
		})
	})

	t.Run("removing the first moves all traffic", func(t *testing.T) {
		m.remove(t, "slice-a")
		waitFor(t, 30*time.Second, "echo-b alone to answer", func() error {
			seen, err := c.callN(10)
			if err != nil {
				return err
			}
			if seen["echo-b"] != 10 {
				return fmt.Errorf("answers by backend: %v", seen)
			}
			return nil
		})
	})

	t.Run("a DestinationRule shapes CDS and EDS", func(t *testing.T) {
		m.apply(t, "rule", fx.render(ruleYAML))
		defaultCluster := fmt.Sprintf("outbound|7070||%s", host)
		v1 := fmt.Sprintf("outbound|7070|v1|%s", host)
		v2 := fmt.Sprintf("outbound|7070|v2|%s", host)
		waitFor(t, 30*time.Second, "the rule's load balancer in CDS", func() error {
			clusters := clustersOf(t, fetch(t, cp, ns, clusterType, defaultCluster, v1, v2))
			if got := clusters[defaultCluster].GetLbPolicy(); got != clusterv3.Cluster_LEAST_REQUEST {
				return fmt.Errorf("%s lb policy %v", defaultCluster, got)
			}
			if clusters[v1] == nil || clusters[v2] == nil {
				return fmt.Errorf("subset clusters missing: %v", keys(clusters))
			}
			if got := clusters[v2].GetLbPolicy(); got != clusterv3.Cluster_RING_HASH {
				return fmt.Errorf("%s lb policy %v, want the subset's RING_HASH", v2, got)
			}
			return nil
		})
		// The subsets select endpoints by the labels of the Pods behind them.
		clas := loadAssignmentsOf(t, fetch(t, cp, ns, endpointType, v1, v2))
		if n := endpointCount(clas[v2]); n != 1 {
			t.Errorf("subset v2 has %d endpoints, want echo-b only", n)
		}
		if n := endpointCount(clas[v1]); n != 0 {
			t.Errorf("subset v1 has %d endpoints, want none (echo-a was removed)", n)
		}
		// The real client was pushed the new cluster too, and still routes.
		waitFor(t, 30*time.Second, "the client's CDS to carry the rule", func() error {
			code, body := cp.get(t, "/debug/config_dump?proxyID="+c.id)
			if code != 200 || !strings.Contains(body, "LEAST_REQUEST") {
				return fmt.Errorf("config_dump %d: no LEAST_REQUEST in what the client was sent", code)
			}
			return nil
		})
		if got, err := c.call(); err != nil || got != "echo-b" {
			t.Fatalf("RPC after the rule: %q, %v", got, err)
		}
	})

	t.Run("a client sending a malformed request loses only its own stream", func(t *testing.T) {
		stream := openADS(t, cp)
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: observerNode(ns)}); err != nil {
			t.Fatal(err)
		}
		_, err := stream.Recv()
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("request without a type URL: got %v, want InvalidArgument", err)
		}
		if got, err := c.call(); err != nil || got != "echo-b" {
			t.Fatalf("RPC after another client's bad stream: %q, %v", got, err)
		}
	})

	t.Run("a type the client is not served is answered empty, and its stream kept", func(t *testing.T) {
		stream := openADS(t, cp)
		const nameTable = "type.googleapis.com/istio.networking.nds.v1.NameTable"
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: observerNode(ns), TypeUrl: nameTable}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil || resp.GetTypeUrl() != nameTable || len(resp.GetResources()) != 0 {
			t.Fatalf("NDS request: got %v (%d resources), %v; want an empty NDS response", resp.GetTypeUrl(), len(resp.GetResources()), err)
		}
		if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: listenerType, ResourceNames: []string{host + ":7070"}}); err != nil {
			t.Fatal(err)
		}
		if resp, err := stream.Recv(); err != nil || len(resp.GetResources()) != 1 {
			t.Fatalf("LDS on the same stream: %d resources, %v; want the listener", len(resp.GetResources()), err)
		}
	})

	t.Run("a VirtualService sends every call to one subset, and its removal undoes it", func(t *testing.T) {
		m.apply(t, "slice-a", fx.render(sliceYAML, "echo-a", a.port))
		bothAnswer := func() error {
			seen, err := c.callN(30)
			if err != nil {
				return err
			}
			if seen["echo-a"] == 0 || seen["echo-b"] == 0 {
				return fmt.Errorf("answers by backend: %v", seen)
			}
			return nil
		}
		waitFor(t, 30*time.Second, "both backends to answer again", bothAnswer)
		m.apply(t, "invalid-route", fx.render(invalidRouteYAML))
		m.apply(t, "route", fx.render(routeYAML))
		waitFor(t, 30*time.Second, "subset v1 (echo-a) alone to answer", func() error {
			seen, err := c.callN(10)
			if err != nil {
				return err
			}
			if seen["echo-a"] != 10 {
				return fmt.Errorf("answers by backend: %v", seen)
			}
			return nil
		})
		m.remove(t, "route")
		waitFor(t, 30*time.Second, "both backends to answer without the VirtualService", bothAnswer)
	})

	if n := cp.nacks(t); n != 0 {
		t.Errorf("clients sent %v NACKs; want none", n)
	}
	if n := cp.configErrors(t, "VirtualService"); n < 1 {
		t.Errorf("meshpilot_config_errors_total{kind=\"VirtualService\"} = %v: the invalid VirtualService was not counted", n)
	}
	// Counted by value and kind: in the directory variant a broken Service
	// file is counted too, so a series of any kind would prove nothing.
	if n := cp.configErrors(t, "DestinationRule"); n < 1 {
		t.Errorf("meshpilot_config_errors_total{kind=\"DestinationRule\"} = %v: the invalid DestinationRule was not counted", n)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
