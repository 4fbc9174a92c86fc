package xds

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestEncodedResponseIsWhatProtoMarshals asserts that a shared body plus a
// stream's nonce is byte for byte what proto.Marshal writes for the same
// DiscoveryResponse, for the edge cases of proto3 encoding: no resources,
// empty strings left out, an Any with no value.
func TestEncodedResponseIsWhatProtoMarshals(t *testing.T) {
	big := bytes.Repeat([]byte{0xab}, 300) // a length that takes two varint bytes
	huge := bytes.Repeat([]byte{0xcd}, referencedValueSize)
	cases := []struct {
		name, version, typeURL, nonce string
		resources                     []*anypb.Any
		controlPlane                  *corev3.ControlPlane
	}{
		{name: "empty response", version: "v1", typeURL: ClusterType, nonce: "1"},
		{name: "no version", typeURL: ListenerType, nonce: "7",
			resources: []*anypb.Any{{TypeUrl: ListenerType, Value: []byte{1, 2, 3}}}},
		{name: "several resources, one without value", version: "2026-12-03T04:00:00Z/12", typeURL: EndpointType, nonce: "123456",
			resources: []*anypb.Any{{TypeUrl: EndpointType, Value: big}, {TypeUrl: EndpointType}, {Value: []byte{9}}}},
		{name: "values referenced between copied ones", version: "v9", typeURL: RouteType, nonce: "5",
			resources: []*anypb.Any{{TypeUrl: RouteType, Value: huge}, {TypeUrl: RouteType, Value: big},
				{TypeUrl: RouteType, Value: huge[1:]}, {TypeUrl: RouteType, Value: huge}}},
		{name: "no nonce", version: "v", typeURL: RouteType,
			resources: []*anypb.Any{{TypeUrl: RouteType, Value: []byte("route")}}},
		{name: "a debug type names the control plane", version: "v", typeURL: DebugTypePrefix + "syncz", nonce: "9",
			controlPlane: &corev3.ControlPlane{Identifier: `{"Component":"istiod","ID":"meshpilot-0"}`}},
	}
	c := codec{fallback: encoding.GetCodecV2(protocodec.Name)}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			items := make([]generated, len(tc.resources))
			for i, r := range tc.resources {
				items[i] = generated{name: "r", resource: r}
			}
			var bodies responseBodies
			body := bodies.get(bodyKey{typeURL: tc.typeURL, version: tc.version, hash: 1, resources: len(items)}, items)
			resp := &encodedResponse{typeURL: tc.typeURL, body: body, nonce: tc.nonce}
			if tc.controlPlane != nil {
				resp.controlPlane = controlPlaneField(tc.controlPlane)
			}
			got, err := c.Marshal(resp)
			if err != nil {
				t.Fatal(err)
			}
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(&discoveryv3.DiscoveryResponse{
				VersionInfo: tc.version, Resources: tc.resources, TypeUrl: tc.typeURL, Nonce: tc.nonce,
				ControlPlane: tc.controlPlane,
			})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Materialize(), want) {
				t.Errorf("codec wrote\n%x\nproto.Marshal writes\n%x", got.Materialize(), want)
			}
		})
	}
}

// TestLargeValuesAreReferenced asserts that a body refers to a large value
// (a route configuration of megabytes) instead of holding a copy, and
// copies the small ones.
func TestLargeValuesAreReferenced(t *testing.T) {
	large := bytes.Repeat([]byte{1}, referencedValueSize)
	small := bytes.Repeat([]byte{2}, referencedValueSize-1)
	body := encodeBody("v", RouteType, []generated{
		{name: "a", resource: &anypb.Any{TypeUrl: RouteType, Value: small}},
		{name: "b", resource: &anypb.Any{TypeUrl: RouteType, Value: large}},
	})
	var refs, total int
	for _, c := range body.chunks {
		total += len(c)
		if len(c) > 0 && &c[0] == &large[0] {
			refs++
		}
		if len(c) > 0 && &c[0] == &small[0] {
			t.Error("a value under the threshold is a chunk of its own, not copied")
		}
	}
	if refs != 1 {
		t.Errorf("the large value is referenced by %d chunks, want 1", refs)
	}
	if want := total - len(large); body.copied != want {
		t.Errorf("body counts %d copied bytes, want %d", body.copied, want)
	}
	if want := len(small) + len(large); body.values != want {
		t.Errorf("body counts %d bytes of values, want %d", body.values, want)
	}
}

// TestResponseBodiesShareAndLetGo asserts that streams sending the same
// resources share one body; that the first bodies of a push state outlive
// their sends, up to a budget, for the streams still to come; and that a
// body beyond the budget that no stream holds any more is let go rather
// than kept until the next push.
func TestResponseBodiesShareAndLetGo(t *testing.T) {
	var bodies responseBodies
	items := []generated{{name: "a", resource: &anypb.Any{TypeUrl: ClusterType, Value: []byte("cluster")}}}
	key := bodyKey{typeURL: ClusterType, version: "v1", hash: 42, resources: 1}
	first := bodies.get(key, items)
	if second := bodies.get(key, items); second != first {
		t.Fatal("a second stream sending the same resources got a body of its own")
	}
	other := bodies.get(bodyKey{typeURL: ClusterType, version: "v1", hash: 43, resources: 1}, items)
	if other == first {
		t.Fatal("different resources shared a body")
	}
	bodies.bytes = strongBodyBytes // the budget is spent
	beyondKey := bodyKey{typeURL: ClusterType, version: "v1", hash: 44, resources: 1}
	if beyond := bodies.get(beyondKey, items); beyond == nil {
		t.Fatal("no body beyond the budget")
	}
	firstAddr := fmt.Sprintf("%p", first)
	first, other = nil, nil
	runtime.GC()
	runtime.GC()
	held := func(k bodyKey) *responseBody {
		v, _ := bodies.m.Load(k)
		return v.(*bodySlot).body.Value()
	}
	if b := held(key); b == nil || fmt.Sprintf("%p", b) != firstAddr {
		t.Error("a body within the budget was let go before the push state")
	}
	if held(beyondKey) != nil {
		t.Error("a body beyond the budget that no stream holds is still kept")
	}
}

// TestResponseBodiesMarshalOncePerStorm asserts that streams asking for the
// same body at the same moment, as a connect storm's do, all get one body
// rather than each marshalling a copy of its own.
func TestResponseBodiesMarshalOncePerStorm(t *testing.T) {
	items := make([]generated, 2000)
	for i := range items {
		items[i] = generated{name: fmt.Sprint(i), resource: &anypb.Any{TypeUrl: ClusterType, Value: make([]byte, 2048)}}
	}
	var bodies responseBodies
	key := bodyKey{typeURL: ClusterType, version: "v1", hash: 7, resources: len(items)}
	const streams = 16
	got := make([]*responseBody, streams)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got[i] = bodies.get(key, items)
		}()
	}
	close(start)
	wg.Wait()
	for i, b := range got {
		if b != got[0] {
			t.Fatalf("stream %d got a body of its own: the body was marshalled more than once", i)
		}
	}
	if len(bodies.strong) != 1 {
		t.Errorf("the push state holds %d bodies for one key, want 1", len(bodies.strong))
	}
}
