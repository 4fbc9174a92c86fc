package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The ADS methods, by full name: streams open without the generated stubs,
// so that requests and responses can pass through rawCodec.
const (
	adsSotW  = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
	adsDelta = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
)

// sender is one open stream; only the goroutine running stream sends.
type sender struct {
	s        grpc.ClientStream
	delta    bool
	node     *corev3.Node
	nodeSent bool
}

// DiscoveryRequest field numbers.
const (
	reqVersion       = 1
	reqNode          = 2
	reqResourceNames = 3
	reqTypeURL       = 4
	reqNonce         = 5
)

// sotw encodes a DiscoveryRequest by hand around the cached names.
func (s *sender) sotw(p pending) error {
	// Fields in field order: version, node, the names, type URL, nonce.
	var head []byte
	if p.version != "" {
		head = protowire.AppendTag(head, reqVersion, protowire.BytesType)
		head = protowire.AppendString(head, p.version)
	}
	if !s.nodeSent {
		node, err := proto.Marshal(s.node)
		if err != nil {
			return err
		}
		head = protowire.AppendTag(head, reqNode, protowire.BytesType)
		head = protowire.AppendBytes(head, node)
		s.nodeSent = true
	}
	tail := make([]byte, 0, len(p.url)+len(p.nonce)+8)
	tail = protowire.AppendTag(tail, reqTypeURL, protowire.BytesType)
	tail = protowire.AppendString(tail, p.url)
	if p.nonce != "" {
		tail = protowire.AppendTag(tail, reqNonce, protowire.BytesType)
		tail = protowire.AppendString(tail, p.nonce)
	}
	return s.s.SendMsg(rawRequest{head, p.namesWire, tail})
}

func (s *sender) deltaReq(req *discoveryv3.DeltaDiscoveryRequest) error {
	if !s.nodeSent {
		req.Node, s.nodeSent = s.node, true
	}
	return s.s.SendMsg(req)
}

func (c *Client) stream(ctx context.Context) error {
	method := adsSotW
	if c.delta {
		method = adsDelta
	}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c.mu.Lock()
	conn := c.conn
	c.endStream = cancel
	c.mu.Unlock()
	st, err := conn.NewStream(sctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method,
		grpc.ForceCodecV2(rawCodec{}), grpc.WaitForReady(true))
	if err != nil {
		return rejoinOr(sctx, err)
	}
	snd := &sender{s: st, delta: c.delta, node: c.node}
	c.mu.Lock()
	c.streams++
	c.streamStart, c.fullAt = time.Now(), time.Time{}
	for _, sub := range c.types {
		sub.responded, sub.nonce = false, ""
		for _, n := range sub.names {
			n.got = false
		}
		sub.nGot = 0
		clear(sub.sent)
	}
	var reqs []pending
	if c.streams == 1 {
		reqs = c.begin()
	} else {
		reqs = c.resubscribe()
	}
	c.mu.Unlock()
	if err := c.send(snd, reqs); err != nil {
		return rejoinOr(sctx, err)
	}
	var rb recvBuf
	var resp response
	for {
		if err := st.RecvMsg(&rb); err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				err = fmt.Errorf("stream closed: %w", err)
			}
			return rejoinOr(sctx, err)
		}
		b := rb.b
		if err := skimResponse(b, c.delta, &resp); err != nil {
			return fmt.Errorf("skim response: %w", err)
		}
		c.mu.Lock()
		c.received[resp.typeURL]++
		c.bytes += int64(len(b))
		reqs := c.handle(&resp)
		c.mu.Unlock()
		rb.release(&resp)
		if err := c.send(snd, reqs); err != nil {
			return rejoinOr(sctx, err)
		}
	}
}

// rejoinOr is errRejoin if Rejoin ended the stream of ctx, else err.
func rejoinOr(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), errRejoin) {
		return errRejoin
	}
	return err
}

// pending is a request computed under the lock and sent outside it.
type pending struct {
	url         string
	ack         bool
	version     string
	nonce       string
	namesWire   []byte
	subscribe   []string
	unsubscribe []string
	wildcard    bool
}

func (c *Client) send(snd *sender, reqs []pending) error {
	for _, r := range reqs {
		var err error
		if c.delta {
			err = snd.deltaReq(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.url, ResponseNonce: r.nonce,
				ResourceNamesSubscribe: r.subscribe, ResourceNamesUnsubscribe: r.unsubscribe})
		} else {
			err = snd.sotw(r)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
