package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshpilot/meshpilot/internal/xdstest"
)

// TestDeltaClusters subscribes to CDS over delta xDS with a wildcard, as a
// proxyless client and as an Envoy sidecar, and follows a service being
// added and removed: each response carries only what changed, and removals
// are listed by name.
func TestDeltaClusters(t *testing.T) {
	for _, tc := range []struct {
		name string
		node *corev3.Node
	}{
		{"proxyless", observerNode("delta")},
		{"sidecar", sidecarNode("delta")},
	} {
		t.Run(tc.name, func(t *testing.T) { runDeltaClusters(t, tc.node) })
	}
}

func runDeltaClusters(t *testing.T, node *corev3.Node) {
	m := newDirMesh(t)
	fx := fixtures{NS: "delta"}
	m.apply(t, "first", fx.render(deltaServiceYAML("first", 8080)))
	cp := startControlPlane(t, m)

	conn, err := grpc.NewClient(cp.xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recv := func() *discoveryv3.DeltaDiscoveryResponse {
		t.Helper()
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		// What is served must be valid: this stream looks at shapes only, so
		// the test fails here rather than NACKing.
		for _, r := range resp.GetResources() {
			c := &clusterv3.Cluster{}
			if err := r.GetResource().UnmarshalTo(c); err != nil {
				t.Fatalf("resource %s: %v", r.GetName(), err)
			}
			if err := xdstest.ValidateDeep(c); err != nil {
				t.Errorf("cluster %s: %v", r.GetName(), err)
			}
		}
		ack := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}
		if err := stream.Send(ack); err != nil {
			t.Fatalf("ack: %v", err)
		}
		return resp
	}
	names := func(resp *discoveryv3.DeltaDiscoveryResponse) []string {
		var out []string
		for _, r := range resp.GetResources() {
			out = append(out, r.GetName())
		}
		slices.Sort(out)
		return out
	}
	var envoy *xdstest.EnvoyClient
	if node.GetMetadata().GetFields()["GENERATOR"] == nil {
		envoy = xdstest.DialEnvoyClient(t, cp.xdsAddr, node, xdstest.Delta)
	}
	first := "outbound|8080||first.delta.svc.cluster.local"
	second := "outbound|9090||second.delta.svc.cluster.local"

	// A wildcard subscription: no names.
	if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: clusterType}); err != nil {
		t.Fatal(err)
	}
	if got := names(recv()); !slices.Contains(got, first) || slices.Contains(got, second) {
		t.Fatalf("initial clusters %v, want %s and not %s", got, first, second)
	}

	m.apply(t, "second", fx.render(deltaServiceYAML("second", 9090)))
	resp := recv()
	if got := names(resp); !slices.Equal(got, []string{second}) {
		t.Fatalf("after adding a service, got %v; want only the new cluster %s", got, second)
	}
	if len(resp.GetRemovedResources()) != 0 {
		t.Fatalf("nothing was removed, yet removed_resources = %v", resp.GetRemovedResources())
	}

	m.remove(t, "first")
	resp = recv()
	if len(resp.GetResources()) != 0 {
		t.Errorf("a removal re-sent unchanged clusters: %v", names(resp))
	}
	if got := resp.GetRemovedResources(); !slices.Equal(got, []string{first}) {
		t.Fatalf("removed_resources = %v, want [%s]", got, first)
	}
	if node.GetMetadata().GetFields()["GENERATOR"] == nil {
		// An Envoy following the same changes accepts them all (no NACK)
		// and ends fully warm with the second service only.
		envoy.RequireWarm(warmBound, func(s xdstest.Snapshot) error {
			if s.Clusters[second] == nil || s.Clusters[first] != nil {
				return fmt.Errorf("active clusters %v, want %s and not %s", keys(s.Clusters), second, first)
			}
			return nil
		})
	}
}

func deltaServiceYAML(name string, port int) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata:
  name: %s
  namespace: {{.NS}}
spec:
  ports:
  - name: grpc
    port: %d
`, name, port)
}
