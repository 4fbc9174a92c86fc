package e2e

import (
	"context"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

var (
	clusterType  = resourcev3.ClusterType
	endpointType = resourcev3.EndpointType
	listenerType = resourcev3.ListenerType
)

// observerNode is a proxyless node in namespace, for looking at exactly what
// a proxy there is sent.
func observerNode(namespace string) *corev3.Node {
	meta, _ := structpb.NewStruct(map[string]any{"GENERATOR": "grpc", "NAMESPACE": namespace})
	return &corev3.Node{Id: nodeID("10.9.9.9", "observer", namespace), Metadata: meta}
}

// openADS opens a state-of-the-world ADS stream to the control plane.
func openADS(t *testing.T, cp *controlPlane) discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	conn, err := grpc.NewClient(cp.xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(func() { cancel(); _ = conn.Close() })
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// fetch subscribes as a proxyless observer in namespace on a new stream and
// returns the first response.
func fetch(t *testing.T, cp *controlPlane, namespace, typeURL string, names ...string) *discoveryv3.DiscoveryResponse {
	t.Helper()
	return fetchAs(t, cp, observerNode(namespace), typeURL, names...)
}

// fetchAs subscribes as node on a new stream and returns the first response.
func fetchAs(t *testing.T, cp *controlPlane, node *corev3.Node, typeURL string, names ...string) *discoveryv3.DiscoveryResponse {
	t.Helper()
	return fetchOn(t, openADS(t, cp), node, typeURL, names...)
}

// fetchOn sends one request on stream and returns its response.
func fetchOn(t *testing.T, stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient, node *corev3.Node,
	typeURL string, names ...string,
) *discoveryv3.DiscoveryResponse {
	t.Helper()
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typeURL, ResourceNames: names}); err != nil {
		t.Fatalf("send %s: %v", typeURL, err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("recv %s: %v", typeURL, err)
	}
	if resp.GetTypeUrl() != typeURL {
		t.Fatalf("asked for %s, got %s", typeURL, resp.GetTypeUrl())
	}
	_ = stream.CloseSend()
	return resp
}

func clustersOf(t *testing.T, resp *discoveryv3.DiscoveryResponse) map[string]*clusterv3.Cluster {
	t.Helper()
	out := map[string]*clusterv3.Cluster{}
	for _, a := range resp.GetResources() {
		c := &clusterv3.Cluster{}
		if err := a.UnmarshalTo(c); err != nil {
			t.Fatal(err)
		}
		out[c.GetName()] = c
	}
	return out
}

func loadAssignmentsOf(t *testing.T, resp *discoveryv3.DiscoveryResponse) map[string]*endpointv3.ClusterLoadAssignment {
	t.Helper()
	out := map[string]*endpointv3.ClusterLoadAssignment{}
	for _, a := range resp.GetResources() {
		cla := &endpointv3.ClusterLoadAssignment{}
		if err := a.UnmarshalTo(cla); err != nil {
			t.Fatal(err)
		}
		out[cla.GetClusterName()] = cla
	}
	return out
}

// endpointCount is the number of endpoints a CLA lists, all localities.
func endpointCount(cla *endpointv3.ClusterLoadAssignment) int {
	n := 0
	for _, l := range cla.GetEndpoints() {
		n += len(l.GetLbEndpoints())
	}
	return n
}
