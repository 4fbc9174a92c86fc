package xds

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

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

// A request larger than the server accepts (4 MiB, gRPC's default, which
// the production server sets explicitly) ends its own stream with
// ResourceExhausted; a stream beside it on the same connection goes on.
func TestOversizedRequestEndsOnlyItsStream(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	healthy := h.sotw("healthy")
	healthy.ack(healthy.subscribe(ClusterType))

	// 5 MiB of resource names, each a plausible hostname.
	huge := make([]string, 0, 5<<20/64)
	for i := range cap(huge) {
		huge = append(huge, fmt.Sprintf("%056d.svc", i))
	}
	// Subtests would fail through the harness's (parent) test: these run in
	// line.
	sotw := h.sotw("oversized")
	sotw.send(&discoveryv3.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: huge})
	if err := sotw.streamError(); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("sotw: stream ended with %v, want ResourceExhausted", err)
	}
	delta := h.delta("oversized-delta")
	delta.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: huge})
	if err := delta.streamError(); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("delta: stream ended with %v, want ResourceExhausted", err)
	}
	// A client's oversized request is its own mistake, not the server's.
	h.eventually("stream_errors_total{invalid_argument} to count both oversized streams", func() bool {
		return h.counter(h.server.metrics.streamErrors, reasonInvalidArgument) >= 2
	})
	if got := h.counter(h.server.metrics.streamErrors, reasonRecvError); got != 0 {
		t.Errorf("stream_errors_total{recv_error} = %v, want 0: an oversized request is the client's error", got)
	}
	addService(h.store, "c", "10.1.0.3")
	if cds := healthy.expect(ClusterType); len(cds.GetResources()) != 3 {
		t.Fatalf("healthy stream got %d clusters, want 3", len(cds.GetResources()))
	}
}

// Node metadata that cannot describe a proxy ends the stream with
// InvalidArgument and a message that says what is wrong; metadata the
// server does not read, however odd, is ignored.
func TestGarbageNodeMetadata(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	healthy := h.sotw("healthy")
	healthy.ack(healthy.subscribe(ClusterType))

	meta := func(fields map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(fields)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	deep := map[string]any{"leaf": "x"}
	for range 200 {
		deep = map[string]any{"nested": deep}
	}
	withID := func(id string, fields map[string]any) *corev3.Node {
		return &corev3.Node{Id: id, Metadata: meta(fields)}
	}
	refused := []struct {
		name    string
		node    *corev3.Node
		message string // a word the status message must carry
	}{
		{"labels not a map", withID(proxyID("x"), map[string]any{"LABELS": "app=x"}), "LABELS"},
		{"label value not a string", withID(proxyID("x"), map[string]any{"LABELS": map[string]any{"app": 7.0}}), "LABELS[app]"},
		{"instance IPs garbage", withID(proxyID("x"), map[string]any{"INSTANCE_IPS": "10.0.0.1,not-an-ip"}), "not-an-ip"},
		{"generator a list", withID(proxyID("x"), map[string]any{"GENERATOR": []any{"grpc"}}), "GENERATOR"},
		{"cluster ID a bool", withID(proxyID("x"), map[string]any{"CLUSTER_ID": true}), "CLUSTER_ID"},
		{"id with NUL", withID("sidecar~10.0.0.1\x00~x.default~default.svc.cluster.local", nil), "invalid IP"},
		{"id of a megabyte", withID(strings.Repeat("~", 1<<20), nil), "node id"},
		{"empty namespace", withID("sidecar~10.0.0.1~x~.svc", map[string]any{"NAMESPACE": ""}), "namespace"},
	}
	// In line rather than subtests: the harness fails its own (parent) test.
	for _, tc := range refused {
		c := h.sotwAs(tc.name, tc.node)
		c.send(&discoveryv3.DiscoveryRequest{TypeUrl: ClusterType})
		err := c.streamError()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.message) {
			t.Errorf("%s: stream ended with %.200v, want InvalidArgument naming %q", tc.name, err, tc.message)
		}
		// The message quotes what the client sent, bounded: a gRPC status
		// travels in a header, and the server logs it.
		if n := len(status.Convert(err).Message()); n > 8<<10 {
			t.Errorf("%s: status message of %d bytes", tc.name, n)
		}
	}
	// Metadata the server does not read is ignored, however odd.
	fields := map[string]any{"NAMESPACE": "default", "DEEP": deep, "BLOB": strings.Repeat("ü", 64<<10),
		"ISTIO_VERSION": []any{1.0}, "\x00odd key ☃": "x"}
	odd := h.sotwAs("odd", withID(proxyID("odd"), fields))
	if cds := odd.subscribe(ClusterType); len(cds.GetResources()) != 2 {
		t.Fatalf("odd metadata: CDS = %d clusters, want 2", len(cds.GetResources()))
	}
	addService(h.store, "c", "10.1.0.3")
	if cds := healthy.expect(ClusterType); len(cds.GetResources()) != 3 {
		t.Fatalf("healthy stream got %d clusters, want 3", len(cds.GetResources()))
	}
}

// Resource names are the client's to choose: names that match nothing,
// however odd, get nothing and keep the stream, over both ADS variants, and
// odd type URLs are unserved types (see unserved_test.go), not errors.
func TestOddResourceNamesKeepTheStream(t *testing.T) {
	odd := []struct{ name, resource string }{
		{"NUL", "a\x00.default.svc.cluster.local"},
		{"very long", strings.Repeat("a", 1<<20)},
		{"unicode", "ünïcödé.例え.default.svc.cluster.local"},
		{"star", "*"},
		{"star inside", "*.default.svc.cluster.local"},
		{"empty", ""},
	}
	for _, tc := range odd {
		t.Run("sotw/"+tc.name, func(t *testing.T) {
			want := []string{hostname("a")}
			if tc.resource == wildcardName {
				// Beside names, "*" is the wildcard, in SotW as in delta
				// (TestSotWSubscriptions).
				want = []string{hostname("a"), hostname("b")}
			}
			h := newHarness(t, harnessConfig{seed: seedAB})
			c := h.sotw("sotw-" + strings.ReplaceAll(tc.name, " ", "-"))
			eds := c.subscribe(EndpointType, hostname("a"), tc.resource)
			if got := names(eds.GetResources(), resourceName); !slices.Equal(got, want) {
				t.Fatalf("EDS = %v, want %v", got, want)
			}
			c.ack(eds, hostname("a"), tc.resource)
			c.expectQuiet("after the ACK")
			setEndpoints(h.store, "a", "10.1.0.7")
			if got := names(c.expect(EndpointType).GetResources(), resourceName); !slices.Equal(got, []string{hostname("a")}) {
				t.Fatalf("EDS push = %v, want only %s", got, hostname("a"))
			}
		})
		t.Run("delta/"+tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{seed: seedAB})
			c := h.delta("delta-" + strings.ReplaceAll(tc.name, " ", "-"))
			c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResourceNamesSubscribe: []string{hostname("b"), tc.resource}})
			cds := c.expect(ClusterType)
			for _, r := range cds.GetResources() {
				if r.GetName() != hostname("a") && r.GetName() != hostname("b") {
					t.Fatalf("CDS carries %q, which is no service", r.GetName())
				}
			}
			c.ack(cds)
			c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResourceNamesUnsubscribe: []string{tc.resource}})
			c.expectQuiet("after unsubscribing the odd name")
		})
	}
	t.Run("odd type URLs", func(t *testing.T) {
		h := newHarness(t, harnessConfig{seed: seedAB})
		c := h.sotw("odd-types")
		for _, typeURL := range []string{"type.googleapis.com/\x00", "*", strings.Repeat("t", 1<<20), "ünïcödé"} {
			if r := c.subscribe(typeURL); len(r.GetResources()) != 0 {
				t.Fatalf("an unserved type got %d resources", len(r.GetResources()))
			}
		}
		if cds := c.subscribe(ClusterType); len(cds.GetResources()) != 2 {
			t.Fatalf("CDS after the odd types = %d clusters, want 2", len(cds.GetResources()))
		}
	})
}

// streamError waits for the delta stream to end and returns its error.
func (c *deltaClient) streamError() error {
	c.h.t.Helper()
	for {
		select {
		case <-c.responses:
		case err := <-c.errs:
			return err
		case <-time.After(waitLimit):
			c.h.t.Fatal("stream did not end")
			return nil
		}
	}
}
