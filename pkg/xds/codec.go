package xds

import (
	"sync"
	"weak"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// A state-of-the-world response is the same bytes for every proxy that is
// sent the same resources, but for its nonce. Marshalling it per stream made
// each of 50 identical sidecars cost its own multi-megabyte buffer, built
// and copied at once when a push reached them all: the control plane's
// peak memory. So the rest of the response is marshalled once, shared, and
// each stream adds only its nonce: protobuf fields may be written in any
// order and a message is the concatenation of its fields, so body + nonce
// field is a valid DiscoveryResponse, and it is what proto.Marshal writes
// (fields 1, 2 and 4, then 5 and 6; codec_test.go checks).

// ServerOptions are the gRPC server options the xDS server needs on the
// grpc.Server it is registered on: its codec, which sends shared response
// bodies as they are and treats every other message as gRPC's proto codec
// does.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ForceServerCodecV2(codec{fallback: encoding.GetCodecV2(protocodec.Name)})}
}

// encodedResponse is a DiscoveryResponse to send: the shared body, this
// stream's nonce, and for Istio's debug types the control plane's identity
// (DebugIdentityInterceptor sets it: the marshalled control_plane field).
type encodedResponse struct {
	typeURL      string
	body         *responseBody
	nonce        string
	controlPlane []byte
}

// responseBody holds the marshalled version_info, resources and type_url of
// a response, in chunks to be sent one after the other; shared by every
// stream that sends it, never modified.
type responseBody struct {
	chunks [][]byte
	// copied is how many of the body's bytes it holds itself; the rest are
	// values it refers to.
	copied int
	// values is the size of the resources' values, the figure the
	// response-size metrics report. Summed once here, not by each of the
	// thousands of streams that send the body.
	values int
}

// referencedValueSize is the size from which a resource's value becomes a
// chunk of the body instead of being copied into it. A sidecar's route
// configuration of thousands of virtual hosts is megabytes that the
// generator's cache already holds; a copy in every distinct body doubled
// what a push state kept. Smaller values are copied, so a body of thousands
// of clusters stays one chunk.
const referencedValueSize = 32 << 10

var (
	responseDesc       = (&discoveryv3.DiscoveryResponse{}).ProtoReflect().Descriptor()
	respVersionField   = responseDesc.Fields().ByName("version_info").Number()
	respResourcesField = responseDesc.Fields().ByName("resources").Number()
	respTypeURLField   = responseDesc.Fields().ByName("type_url").Number()
	respNonceField     = responseDesc.Fields().ByName("nonce").Number()
	respControlPlane   = responseDesc.Fields().ByName("control_plane").Number()
	anyDesc            = (&anypb.Any{}).ProtoReflect().Descriptor()
	anyTypeURLField    = anyDesc.Fields().ByName("type_url").Number()
	anyValueField      = anyDesc.Fields().ByName("value").Number()
)

// encodeBody marshals what a response of items shares. Empty strings are
// left out, as proto3 leaves them out.
func encodeBody(version, typeURL string, items []generated) *responseBody {
	copied := sizeString(respVersionField, version) + sizeString(respTypeURLField, typeURL)
	referenced, values := 0, 0
	for _, it := range items {
		n := anySize(it.resource)
		copied += protowire.SizeTag(respResourcesField) + protowire.SizeBytes(n)
		v := it.resource.GetValue()
		values += len(v)
		if len(v) >= referencedValueSize {
			copied -= len(v)
			referenced++
		}
	}
	// b never grows past its capacity, so the chunks cut from it stay valid.
	b := make([]byte, 0, copied)
	chunks := make([][]byte, 0, 2*referenced+1)
	start := 0
	b = appendString(b, respVersionField, version)
	for _, it := range items {
		b = protowire.AppendTag(b, respResourcesField, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(anySize(it.resource)))
		b = appendString(b, anyTypeURLField, it.resource.GetTypeUrl())
		v := it.resource.GetValue()
		if len(v) == 0 {
			continue
		}
		b = protowire.AppendTag(b, anyValueField, protowire.BytesType)
		if len(v) < referencedValueSize {
			b = protowire.AppendBytes(b, v)
			continue
		}
		b = protowire.AppendVarint(b, uint64(len(v)))
		chunks = append(chunks, b[start:len(b):len(b)], v)
		start = len(b)
	}
	b = appendString(b, respTypeURLField, typeURL)
	chunks = append(chunks, b[start:])
	return &responseBody{chunks: chunks, copied: len(b), values: values}
}

func anySize(a *anypb.Any) int {
	n := sizeString(anyTypeURLField, a.GetTypeUrl())
	if v := a.GetValue(); len(v) > 0 {
		n += protowire.SizeTag(anyValueField) + protowire.SizeBytes(len(v))
	}
	return n
}

func sizeString(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(s))
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// bodyKey identifies a response body within one push state: the type, the
// version it is sent with, and the hash of the resources (names and
// content hashes, as responseHash computes; the same hash already decides
// whether a response changed anything).
type bodyKey struct {
	typeURL, version string
	hash             uint64
	resources        int
}

// responseBodies shares the bodies of one push state. The first
// strongBodyBytes of them are held for the push state's life: the streams
// of a connect storm arrive over a second or more, and a body held only
// while some stream sends it was collected between them and marshalled
// again (an eighth of the control plane's CPU in the storm). Beyond that
// budget, bodies are held weakly, so that many distinct responses (a warm
// subset, proxies that differ) are not all kept until the next push: a
// body lives while some stream still sends it, and a proxy that asks for
// the same resources later has it marshalled again.
//
// One stream marshals a body while the others that want it wait: streams
// of a storm ask for the same body within microseconds, and each
// marshalling its own multi-megabyte copy was a third of the control
// plane's CPU in the storm, and that much garbage.
type responseBodies struct {
	m sync.Map // bodyKey -> *bodySlot

	mu     sync.Mutex
	strong []*responseBody
	bytes  int
}

// bodySlot is where one key's body is found; mu is held while it is
// marshalled.
type bodySlot struct {
	mu   sync.Mutex
	body weak.Pointer[responseBody]
}

// strongBodyBytes bounds the bodies one push state holds strongly: the
// complete responses of a 5,000-service sidecar take about 5 MiB.
const strongBodyBytes = 32 << 20

func (r *responseBodies) get(key bodyKey, items []generated) *responseBody {
	v, ok := r.m.Load(key)
	if !ok {
		v, _ = r.m.LoadOrStore(key, new(bodySlot))
	}
	slot := v.(*bodySlot)
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if b := slot.body.Value(); b != nil {
		return b
	}
	b := encodeBody(key.version, key.typeURL, items)
	slot.body = weak.Make(b)
	r.mu.Lock()
	if r.bytes+b.copied <= strongBodyBytes {
		r.strong = append(r.strong, b)
		r.bytes += b.copied
	}
	r.mu.Unlock()
	return b
}

// codec marshals encodedResponses as their shared body and a nonce field of
// their own, without copying the body, decodes DiscoveryRequests with
// unmarshalRequest, and handles everything else with gRPC's proto codec.
type codec struct{ fallback encoding.CodecV2 }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	r, ok := v.(*encodedResponse)
	if !ok {
		return c.fallback.Marshal(v)
	}
	tail := appendString(nil, respNonceField, r.nonce)
	tail = append(tail, r.controlPlane...)
	out := make(mem.BufferSlice, 0, len(r.body.chunks)+1)
	for _, c := range r.body.chunks {
		out = append(out, mem.SliceBuffer(c))
	}
	return append(out, mem.SliceBuffer(tail)), nil
}

// Unmarshal decodes DiscoveryRequests with unmarshalRequest, everything
// else with gRPC's proto codec.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*discoveryv3.DiscoveryRequest)
	if !ok {
		return c.fallback.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return unmarshalRequest(data[0].ReadOnlyData(), req)
	}
	// A request of many frames is decoded from one copy of it. gRPC's own
	// pool clears each buffer it hands out, and clearing a quarter-MiB EDS
	// ACK per request was a third of decoding it; this scratch is written
	// over in full and read no further, and unmarshalRequest keeps none of
	// it (the names are copied, the rest proto.Unmarshal copies).
	scratch := requestScratch.Get().(*[]byte)
	defer requestScratch.Put(scratch)
	n := data.Len()
	if cap(*scratch) < n {
		*scratch = make([]byte, n)
	}
	b := (*scratch)[:n]
	data.CopyTo(b)
	return unmarshalRequest(b, req)
}

var requestScratch = sync.Pool{New: func() any { return new([]byte) }}

func (c codec) Name() string { return protocodec.Name }

// controlPlaneField marshals the control_plane field of a response.
func controlPlaneField(cp *corev3.ControlPlane) []byte {
	b, _ := proto.Marshal(cp) // a message of one string always marshals
	out := protowire.AppendTag(nil, respControlPlane, protowire.BytesType)
	return protowire.AppendBytes(out, b)
}
