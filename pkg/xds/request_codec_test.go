package xds

import (
	"hash/maphash"
	"runtime"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// requestSeeds are requests as clients send them: Envoy's EDS request and
// ACK, a NACK, a first request with its node, and gRPC's.
func requestSeeds() []*discoveryv3.DiscoveryRequest {
	names := make([]string, 50)
	for i := range names {
		names[i] = "outbound|80||svc-" + formatUint(uint64(i)) + ".scale-0.svc.cluster.local"
	}
	return []*discoveryv3.DiscoveryRequest{
		{},
		{TypeUrl: ClusterType, Node: &corev3.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local", Cluster: "a"}},
		{TypeUrl: EndpointType, ResourceNames: names},
		{TypeUrl: EndpointType, ResourceNames: names, VersionInfo: "v3", ResponseNonce: "17"},
		{TypeUrl: ListenerType, ResourceNames: []string{"échø.example:8080", ""}, VersionInfo: "v2", ResponseNonce: "9",
			ErrorDetail: &status.Status{Code: 3, Message: "rejected"}},
	}
}

// TestUnmarshalRequestIsProtoUnmarshal: the names decoder gives what
// proto.Unmarshal gives, for requests as clients marshal them and for the
// names interleaved with other fields and unknown ones, which the wire
// allows.
func TestUnmarshalRequestIsProtoUnmarshal(t *testing.T) {
	var inputs [][]byte
	for _, req := range requestSeeds() {
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, b)
	}
	interleaved := protowire.AppendTag(nil, reqResourceNames, protowire.BytesType)
	interleaved = protowire.AppendString(interleaved, "b")
	interleaved = protowire.AppendTag(interleaved, 4, protowire.BytesType)
	interleaved = protowire.AppendString(interleaved, EndpointType)
	interleaved = protowire.AppendTag(interleaved, 99, protowire.VarintType) // unknown
	interleaved = protowire.AppendVarint(interleaved, 7)
	interleaved = protowire.AppendTag(interleaved, reqResourceNames, protowire.BytesType)
	interleaved = protowire.AppendString(interleaved, "a")
	inputs = append(inputs, interleaved)
	for i, b := range inputs {
		checkUnmarshalRequest(t, b)
		if t.Failed() {
			t.Fatalf("input %d: %x", i, b)
		}
	}
}

// TestUnmarshalRequestRefusesWhatProtoRefuses: a name of invalid UTF-8 and
// a truncated request are errors, as they are for proto.Unmarshal.
func TestUnmarshalRequestRefusesWhatProtoRefuses(t *testing.T) {
	badName := protowire.AppendTag(nil, reqResourceNames, protowire.BytesType)
	badName = protowire.AppendBytes(badName, []byte{0xff, 0xfe})
	good, _ := proto.Marshal(requestSeeds()[2])
	for name, b := range map[string][]byte{"invalid UTF-8 name": badName, "truncated": good[:len(good)-3]} {
		if err := unmarshalRequest(b, &discoveryv3.DiscoveryRequest{}); err == nil {
			t.Errorf("%s: decoded", name)
		}
		checkUnmarshalRequest(t, b)
	}
}

// TestCodecDecodesRequestsOfManyFrames: the codec decodes a request that
// arrives in one buffer or split over several (gRPC reads one per HTTP/2
// frame), and the scratch copy it reuses carries nothing of a longer
// request into a shorter one.
func TestCodecDecodesRequestsOfManyFrames(t *testing.T) {
	c := codec{fallback: encoding.GetCodecV2(protocodec.Name)}
	seeds := requestSeeds()
	// Longest first, so that every later request lands on a dirty scratch.
	slices.SortFunc(seeds, func(a, b *discoveryv3.DiscoveryRequest) int { return proto.Size(b) - proto.Size(a) })
	for _, frame := range []int{1 << 20, 64, 7, 1} {
		for i, req := range seeds {
			raw, err := proto.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			var data mem.BufferSlice
			for b := raw; len(b) > 0; b = b[min(frame, len(b)):] {
				data = append(data, mem.SliceBuffer(b[:min(frame, len(b))]))
			}
			got := &discoveryv3.DiscoveryRequest{}
			if err := c.Unmarshal(data, got); err != nil {
				t.Fatalf("frames of %d bytes, request %d: %v", frame, i, err)
			}
			if !proto.Equal(got, req) {
				t.Fatalf("frames of %d bytes, request %d: decoded %v, want %v", frame, i, got, req)
			}
		}
	}
}

// TestRequestNamesAreShared: requests that carry the same names, byte for
// byte, get one decoded list; other names, or the same names in another
// order, get their own; and the entry goes once no request holds the list.
func TestRequestNamesAreShared(t *testing.T) {
	names := make([]string, 200) // over sharedNamesMin encoded
	for i := range names {
		names[i] = "outbound|80||shared-" + formatUint(uint64(i)) + ".ns.svc.cluster.local"
	}
	reordered := slices.Clone(names)
	reordered[0], reordered[1] = reordered[1], reordered[0]
	decode := func(names []string, nonce string) *discoveryv3.DiscoveryRequest {
		t.Helper()
		raw, err := proto.Marshal(&discoveryv3.DiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: nonce, ResourceNames: names})
		if err != nil {
			t.Fatal(err)
		}
		req := &discoveryv3.DiscoveryRequest{}
		if err := unmarshalRequest(raw, req); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(req.ResourceNames, names) || req.ResponseNonce != nonce {
			t.Fatalf("decoded %d names, nonce %q; want %d, %q", len(req.ResourceNames), req.ResponseNonce, len(names), nonce)
		}
		return req
	}
	same := func(a, b *discoveryv3.DiscoveryRequest) bool { return &a.ResourceNames[0] == &b.ResourceNames[0] }

	first, second := decode(names, "1"), decode(names, "2")
	if !same(first, second) {
		t.Error("two requests of the same names decoded two lists")
	}
	if other := decode(reordered, "3"); same(first, other) {
		t.Error("names in another order share the list")
	}
	smallRaw, _ := proto.Marshal(&discoveryv3.DiscoveryRequest{ResourceNames: names[:2]})
	if decode(names[:2], "4"); sharedRequestNames.has(maphash.Bytes(namesSeed, smallRaw)) {
		t.Error("a list too small to share was shared")
	}
	raw, _ := proto.Marshal(&discoveryv3.DiscoveryRequest{ResourceNames: names})
	key := maphash.Bytes(namesSeed, raw)
	runtime.KeepAlive(first)
	runtime.KeepAlive(second)
	first, second = nil, nil
	deadline := time.Now().Add(10 * time.Second)
	for sharedRequestNames.has(key) && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if sharedRequestNames.has(key) {
		t.Error("the entry of a list no request holds is still there")
	}
}

// TestRecentNamesAreRecognized: a request whose names are, byte for byte
// and with nothing but other fields around them, those of a list decoded
// just before is recognized without parsing them, whatever its other
// fields; names that go on past that list, or are interrupted by another
// field, are not, and decode as proto.Unmarshal decodes them.
func TestRecentNamesAreRecognized(t *testing.T) {
	names := make([]string, 200) // over sharedNamesMin encoded
	for i := range names {
		names[i] = "outbound|80||recent-" + formatUint(uint64(i)) + ".ns.svc.cluster.local"
	}
	marshal := func(req *discoveryv3.DiscoveryRequest) []byte {
		t.Helper()
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	held := &discoveryv3.DiscoveryRequest{}
	if err := unmarshalRequest(marshal(&discoveryv3.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: names}), held); err != nil {
		t.Fatal(err)
	}
	longer := append(slices.Clone(names), "outbound|80||one-more.ns.svc.cluster.local")
	// The names, then a nonce field, then one more name: not contiguous.
	interrupted := append(marshal(&discoveryv3.DiscoveryRequest{ResourceNames: names, ResponseNonce: "7"}),
		marshal(&discoveryv3.DiscoveryRequest{ResourceNames: []string{"late"}})...)
	for _, tc := range []struct {
		name string
		raw  []byte
		want bool
	}{
		{"an ACK of the same names", marshal(&discoveryv3.DiscoveryRequest{VersionInfo: "v2", TypeUrl: EndpointType, ResponseNonce: "9", ResourceNames: names}), true},
		{"a first request, with its node", marshal(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "sidecar~10.0.0.2~b.ns~ns.svc.cluster.local"}, TypeUrl: EndpointType, ResourceNames: names}), true},
		{"one name more", marshal(&discoveryv3.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: longer}), false},
		{"one name fewer", marshal(&discoveryv3.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: names[1:]}), false},
		{"names interrupted by another field", interrupted, false},
		{"no names", marshal(&discoveryv3.DiscoveryRequest{TypeUrl: EndpointType}), false},
	} {
		_, _, got, ok := sharedRequestNames.recognize(tc.raw)
		if ok != tc.want {
			t.Errorf("%s: recognized %v, want %v", tc.name, ok, tc.want)
		}
		if ok && &got[0] != &held.ResourceNames[0] {
			t.Errorf("%s: recognized another list than the one decoded before", tc.name)
		}
		checkUnmarshalRequest(t, tc.raw)
	}
	runtime.KeepAlive(held)
}

func FuzzUnmarshalRequest(f *testing.F) {
	for _, req := range requestSeeds() {
		b, _ := proto.Marshal(req)
		f.Add(b)
	}
	f.Fuzz(checkUnmarshalRequest)
}

func (l *requestNameLists) has(key uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.m[key]
	return ok
}

func checkUnmarshalRequest(t *testing.T, b []byte) {
	want, got := &discoveryv3.DiscoveryRequest{}, &discoveryv3.DiscoveryRequest{}
	wantErr, gotErr := proto.Unmarshal(b, want), unmarshalRequest(b, got)
	if (wantErr == nil) != (gotErr == nil) {
		t.Fatalf("proto.Unmarshal: %v; unmarshalRequest: %v", wantErr, gotErr)
	}
	if wantErr == nil && !proto.Equal(want, got) {
		t.Fatalf("unmarshalRequest = %v, want %v", got, want)
	}
}

// BenchmarkUnmarshalRequest decodes an Envoy EDS ACK of the standard
// scenario: 5,000 cluster names.
func BenchmarkUnmarshalRequest(b *testing.B) {
	names := make([]string, 5000)
	for i := range names {
		names[i] = "outbound|80||svc-" + formatUint(uint64(i)) + ".scale-" + formatUint(uint64(i%50)) + ".svc.cluster.local"
	}
	raw, err := proto.Marshal(&discoveryv3.DiscoveryRequest{TypeUrl: EndpointType, VersionInfo: "v1", ResponseNonce: "3", ResourceNames: names})
	if err != nil {
		b.Fatal(err)
	}
	held := &discoveryv3.DiscoveryRequest{}
	if err := unmarshalRequest(raw, held); err != nil {
		b.Fatal(err)
	}
	defer runtime.KeepAlive(held)
	for _, tc := range []struct {
		name   string
		decode func([]byte, *discoveryv3.DiscoveryRequest) error
	}{
		{"proto.Unmarshal", func(b []byte, r *discoveryv3.DiscoveryRequest) error { return proto.Unmarshal(b, r) }},
		// The first request of its names: one string for them all.
		{"unmarshalRequest/new-names", decodeRequest},
		// A request whose names another request still holds (held below):
		// the ACKs of identical sidecars.
		{"unmarshalRequest/shared-names", unmarshalRequest},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for range b.N {
				if err := tc.decode(raw, &discoveryv3.DiscoveryRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
