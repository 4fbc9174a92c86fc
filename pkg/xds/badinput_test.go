package xds

import (
	"context"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// rawCodec sends bytes as they are, to feed the server garbage.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}
func (rawCodec) Unmarshal(mem.BufferSlice, any) error { return nil }
func (rawCodec) Name() string                         { return "proto" }

func TestBadRequestsEndOnlyTheirStream(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	healthy := h.sotw("healthy")
	healthy.ack(healthy.subscribe(ClusterType))

	badNamespace, _ := structpb.NewStruct(map[string]any{"NAMESPACE": 42.0})
	cases := []struct {
		name string
		req  *discoveryv3.DiscoveryRequest
	}{
		{"no node", &discoveryv3.DiscoveryRequest{TypeUrl: ClusterType}},
		{"malformed node id", &discoveryv3.DiscoveryRequest{TypeUrl: ClusterType, Node: &corev3.Node{Id: "just-a-name"}}},
		{"unknown node type", &discoveryv3.DiscoveryRequest{TypeUrl: ClusterType,
			Node: &corev3.Node{Id: "waypoint~10.0.0.1~x.default~default.svc.cluster.local"}}},
		{"non-string metadata", &discoveryv3.DiscoveryRequest{TypeUrl: ClusterType,
			Node: &corev3.Node{Id: proxyID("x"), Metadata: badNamespace}}},
		{"no type URL", &discoveryv3.DiscoveryRequest{Node: nodeFor("x")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stream, err := h.client.StreamAggregatedResources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := stream.Send(tc.req); err != nil {
				t.Fatal(err)
			}
			if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("stream ended with %v, want InvalidArgument", err)
			}
		})
	}
	t.Run("delta without node", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stream, err := h.client.DeltaAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ClusterType}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("stream ended with %v, want InvalidArgument", err)
		}
	})
	t.Run("garbage bytes", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stream, err := h.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true},
			"/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources", grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.SendMsg([]byte{0xff, 0xff, 0xff}); err != nil {
			t.Fatal(err)
		}
		// grpc-go itself answers a message that does not unmarshal with
		// Internal before the handler sees the error; the handler then ends
		// the stream.
		var out []byte
		if err := stream.RecvMsg(&out); status.Code(err) != codes.Internal {
			t.Fatalf("stream ended with %v, want Internal", err)
		}
	})

	// The garbage stream's handler counts its error after the client saw it.
	want := float64(len(cases) + 2)
	h.eventually("stream_errors_total{invalid_argument} to count every bad stream", func() bool {
		return h.counter(h.server.metrics.streamErrors, reasonInvalidArgument) >= want
	})
	if got := h.counter(h.server.metrics.streamErrors, reasonInvalidArgument); got != want {
		t.Fatalf("stream_errors_total{invalid_argument} = %v, want %v", got, want)
	}
	addService(h.store, "c", "10.1.0.3")
	if cds := healthy.expect(ClusterType); len(cds.GetResources()) != 3 {
		t.Fatalf("healthy stream got %d clusters, want 3", len(cds.GetResources()))
	}
}
