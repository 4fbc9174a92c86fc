package loadtest

import (
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// rawCodec hands response bytes to the client unparsed, so that the skim
// is the only decoding, and copies them into the client's own buffer,
// reused from one response to the next: multi-megabyte responses would
// otherwise each be a fresh allocation to clear and collect. Requests are
// encoded by the client (rawRequest) or are protos. Its name is "proto" so
// the server sees the ordinary content type.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(rawRequest); ok {
		out := make(mem.BufferSlice, 0, len(r))
		for _, part := range r {
			if len(part) > 0 {
				out = append(out, mem.SliceBuffer(part))
			}
		}
		return out, nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
	}
	b, err := proto.Marshal(m)
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}

// recvBuf holds the last response; its bytes are valid until release.
// A client keeps a buffer for the many small responses. One over
// recvBufKeep, a route configuration or a CDS response, is copied into a
// buffer lent by largeRecvBufs: kept by every client, they were half of the
// tool's memory (500 clients of a 20,000-Service mesh would have held 6 GiB
// of 12 MB buffers), and allocated anew for each, the tool's CPU under
// config churn rose by a fifth.
type recvBuf struct {
	b     []byte
	small []byte
	lent  *[]byte
}

const recvBufKeep = 256 << 10

var largeRecvBufs = mustBufferPool(mem.NewBinaryTieredBufferPool(19, 20, 21, 22, 23, 24, 25))

func mustBufferPool(p mem.BufferPool, err error) mem.BufferPool {
	if err != nil {
		panic(err)
	}
	return p
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	rb, ok := v.(*recvBuf)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	n := data.Len()
	if n > recvBufKeep {
		rb.lent = largeRecvBufs.Get(n)
		rb.b = *rb.lent
	} else {
		if cap(rb.small) < n {
			rb.small = make([]byte, n)
		}
		rb.b = rb.small[:n]
	}
	data.CopyTo(rb.b)
	return nil
}

// release returns a lent buffer; r, whose resources alias it, lets go too.
func (rb *recvBuf) release(r *response) {
	if rb.lent != nil {
		clear(r.resources)
		largeRecvBufs.Put(rb.lent)
		rb.lent, rb.b = nil, nil
	}
}

func (rawCodec) Name() string { return "proto" }

// rawRequest is a request the client encoded itself, in parts that are
// sent one after the other: a message is the concatenation of its fields,
// so the cached encoding of thousands of names goes out as it is, not
// copied into every ACK (a quarter of the tool's CPU under endpoint churn).
type rawRequest [][]byte
