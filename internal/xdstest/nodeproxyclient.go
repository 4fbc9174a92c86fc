package xdstest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// NodeProxyClient is a delta ADS client that follows workload discovery as
// a node proxy (ztunnel) does, so that tests see what it would end up
// holding:
//
//   - It subscribes to every resource of each type it is given, with a
//     first request of the type that names nothing (the wildcard, for a
//     type whose first request may be one), and keeps what each response
//     adds or replaces, by name, until a response removes it.
//   - A response with a resource that does not unpack, is of another type
//     or repeats a name is NACKed, and nothing of it is kept.
//   - A new stream asks for each type again with initial_resource_versions,
//     the version of every resource it holds, as the delta protocol has a
//     client that reconnects do ("Incremental xDS", xds_protocol); it keeps
//     what it holds meanwhile.
//
// All methods are safe for concurrent use. Returned protos are shared with
// the client and must not be modified.
type NodeProxyClient struct {
	t   testing.TB
	ads adsClient

	mu sync.Mutex
	st *nodeProxyState
}

// NewNodeProxyClient opens a delta ADS stream on conn as node and
// subscribes to every resource of each of typeURLs.
func NewNodeProxyClient(t testing.TB, conn grpc.ClientConnInterface, node *corev3.Node, typeURLs ...string) *NodeProxyClient {
	t.Helper()
	c := &NodeProxyClient{t: t, st: &nodeProxyState{types: slices.Clone(typeURLs), held: map[string]map[string]heldResource{}}}
	for _, typeURL := range typeURLs {
		c.st.held[typeURL] = map[string]heldResource{}
	}
	c.ads = adsClient{open: func(ctx context.Context) (transport, error) { return openDelta(ctx, conn, node) }, model: c.st, mu: &c.mu}
	t.Cleanup(c.Close)
	if err := c.ads.connect(); err != nil {
		t.Fatalf("node proxy client: open stream: %v", err)
	}
	return c
}

// Disconnect closes the client's stream and leaves it closed until
// Reconnect; the client keeps what it holds.
func (c *NodeProxyClient) Disconnect() { c.ads.disconnect() }

// Reconnect closes the client's stream, if it has one, and opens a new one
// on the same connection. A closed client stays closed.
func (c *NodeProxyClient) Reconnect() {
	c.t.Helper()
	if err := c.ads.reconnect(); err != nil {
		c.t.Fatalf("node proxy client: reopen stream: %v", err)
	}
}

// Close ends the stream. It is idempotent.
func (c *NodeProxyClient) Close() { c.ads.close(nil) }

// Active returns what the client holds, under Snapshot.Workload.
func (c *NodeProxyClient) Active() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	snap := Snapshot{Workload: map[string]map[string]proto.Message{}}
	for typeURL, held := range c.st.held {
		byName := map[string]proto.Message{}
		for name, r := range held {
			byName[name] = r.m
		}
		snap.Workload[typeURL] = byName
	}
	return snap
}

// Answered reports whether every type has had a response on the current
// stream since its first request there.
func (c *NodeProxyClient) Answered() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.tr != nil && len(c.st.answered) == len(c.st.types)
}

// Nacks lists every NACK sent, in order.
func (c *NodeProxyClient) Nacks() []Nack {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.st.nacks)
}

// Err is the error that ended the stream by itself, or nil while it runs
// or after Disconnect.
func (c *NodeProxyClient) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.err
}

type heldResource struct {
	version string
	m       proto.Message
}

// nodeProxyState is what the client holds; the client's mu guards it.
type nodeProxyState struct {
	tr       transport // the stream's, nil while disconnected
	types    []string
	held     map[string]map[string]heldResource // type URL → name →
	answered map[string]bool                    // types answered on this stream
	nacks    []Nack
	err      error
}

func (st *nodeProxyState) connect(tr transport) {
	st.tr, st.err, st.answered = tr, nil, map[string]bool{}
	for _, typeURL := range st.types {
		versions := map[string]string{}
		for name, r := range st.held[typeURL] {
			versions[name] = r.version
		}
		st.send(SentRequest{TypeURL: typeURL, InitialResourceVersions: versions})
	}
}

func (st *nodeProxyState) disconnect()               { st.tr = nil }
func (st *nodeProxyState) current(tr transport) bool { return st.tr == tr }
func (st *nodeProxyState) fail(err error)            { st.err = err }

func (st *nodeProxyState) send(r SentRequest) {
	r.At = time.Now()
	if err := st.tr.send(r); err != nil && st.err == nil {
		st.err = err
	}
}

func (st *nodeProxyState) handle(resp *response) {
	held := st.held[resp.typeURL]
	if held == nil {
		return // a type it never asked for
	}
	decoded, err := st.decode(resp)
	if err != nil {
		st.nacks = append(st.nacks, Nack{TypeURL: resp.typeURL, Version: resp.version, Nonce: resp.nonce, Error: err.Error()})
		st.send(SentRequest{TypeURL: resp.typeURL, ResponseNonce: resp.nonce, ErrorDetail: err.Error()})
		return
	}
	for _, name := range resp.removed {
		delete(held, name)
	}
	maps.Copy(held, decoded)
	st.answered[resp.typeURL] = true
	st.send(SentRequest{TypeURL: resp.typeURL, ResponseNonce: resp.nonce})
}

// decode unpacks a response's resources; any problem rejects it whole.
func (st *nodeProxyState) decode(resp *response) (map[string]heldResource, error) {
	out := map[string]heldResource{}
	var errs []error
	for _, r := range resp.resources {
		if r.any.GetTypeUrl() != resp.typeURL {
			errs = append(errs, fmt.Errorf("resource %q of type %s in a %s response", r.name, r.any.GetTypeUrl(), resp.typeURL))
			continue
		}
		m, err := r.any.UnmarshalNew()
		if err != nil {
			errs = append(errs, fmt.Errorf("unpack %q: %w", r.name, err))
			continue
		}
		if _, dup := out[r.name]; dup || slices.Contains(resp.removed, r.name) {
			errs = append(errs, fmt.Errorf("duplicate name %s found in the union of added+removed resources", r.name))
		}
		out[r.name] = heldResource{version: r.version, m: m}
	}
	return out, errors.Join(errs...)
}
