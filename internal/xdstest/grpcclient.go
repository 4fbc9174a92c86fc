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

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// GRPCClient is an ADS client that behaves as grpc-go's xDS client (v1.85,
// internal/xds/clients/xdsclient) does, so that tests see what a proxyless
// gRPC application would end up using:
//
//   - It speaks state-of-the-world ADS only and never subscribes to a
//     wildcard: LDS to the names it is given (dial targets "host:port", a
//     server's inbound listener), then by name whatever they lead to: RDS
//     for an HTTP connection manager's route_config_name, CDS for the
//     clusters of the routes, EDS for each EDS cluster (gRFC A27).
//   - Nothing warms: each accepted resource is used at once.
//   - LDS and CDS responses are full state: a resource it holds that a
//     response leaves out is deleted ("resource ... has been removed",
//     authority.go, for types with AllResourcesRequiredInSotW). A name
//     subscribed to but never received is not, and neither is a route
//     configuration or load assignment left out.
//   - A name no longer referenced is unsubscribed and its resource dropped
//     (an xDS client forgets a resource when its last watcher goes).
//   - A response is taken resource by resource (gRFC A46;
//     xdsChannel.decodeResponse, channel.go): each resource that unpacks
//     and passes ValidateDeep is used, one that fails keeps what the client
//     held of its name, and a later resource of a name replaces an earlier
//     one. Any failure NACKs the response with the last accepted version.
//     A resource that does not unpack has no name, so a full-state response
//     deletes what the client held of it.
//   - A new stream sends, for every type with subscriptions, the whole set
//     of names with the last accepted version and no nonce
//     (adsStreamImpl.sendExisting, ads_stream.go).
//
// All methods are safe for concurrent use. Returned protos are shared with
// the client and must not be modified.
type GRPCClient struct {
	t   testing.TB
	ads adsClient

	mu sync.Mutex
	st *grpcState
}

// grpcTypes are the types a gRPC client follows, in the order it
// subscribes to them.
var grpcTypes = []string{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType}

// NewGRPCClient opens a SotW ADS stream on conn as node, subscribes to the
// listeners named (at least one) and follows what they lead to. The client
// closes itself when the test ends.
func NewGRPCClient(t testing.TB, conn grpc.ClientConnInterface, node *corev3.Node, listeners ...string) *GRPCClient {
	t.Helper()
	if len(listeners) == 0 {
		t.Fatal("grpc client: no listener to subscribe to")
	}
	c := &GRPCClient{t: t, st: newGRPCState(listeners)}
	c.ads = adsClient{open: func(ctx context.Context) (transport, error) { return openSotW(ctx, conn, node) }, model: c.st, mu: &c.mu}
	t.Cleanup(c.Close)
	if err := c.ads.connect(); err != nil {
		t.Fatalf("grpc client: open stream: %v", err)
	}
	return c
}

// Disconnect closes the client's stream, as a broken connection does, and
// leaves it closed until Reconnect; the client keeps what it holds.
func (c *GRPCClient) Disconnect() { c.ads.disconnect() }

// Reconnect closes the client's stream, if it has one, and opens a new one
// on the same connection, keeping what it holds. A closed client stays
// closed.
func (c *GRPCClient) Reconnect() {
	c.t.Helper()
	if err := c.ads.reconnect(); err != nil {
		c.t.Fatalf("grpc client: reopen stream: %v", err)
	}
}

// Close ends the stream. It is idempotent.
func (c *GRPCClient) Close() { c.ads.close(nil) }

// Active returns what the client uses now. It has no Secrets: gRPC reads
// its certificates from the certificate providers of its bootstrap.
func (c *GRPCClient) Active() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.snapshot()
}

// Awaiting lists the names subscribed to and not answered yet, as "TYPE
// name": not received, and for LDS and CDS not left out of a response
// since they were asked for. (A full-state response that crossed the
// request counts as an answer too: the client cannot tell, and grpc-go
// waits for its 15 s resource-not-found timer instead, gRFC A27.) The
// server owes no answer for a route configuration or load assignment that
// does not exist.
func (c *GRPCClient) Awaiting() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, typeURL := range grpcTypes {
		for _, name := range slices.Sorted(maps.Keys(c.st.types[typeURL].awaiting)) {
			out = append(out, shortType(typeURL)+" "+name)
		}
	}
	return out
}

// Nacks lists every NACK sent, in order.
func (c *GRPCClient) Nacks() []Nack {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.st.nacks)
}

// Requests lists every request sent, in order.
func (c *GRPCClient) Requests() []SentRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.st.requests)
}

// Err is the error that ended the stream by itself, or nil while it runs
// or after Disconnect.
func (c *GRPCClient) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.err
}

// grpcState is what the client holds and has asked for; the client's mu
// guards it.
type grpcState struct {
	tr       transport // the stream's, nil while disconnected
	types    map[string]*grpcType
	nacks    []Nack
	requests []SentRequest
	err      error
}

// grpcType is one resource type's subscription and what was received for
// it.
type grpcType struct {
	names     []string // subscribed, sorted
	resources map[string]proto.Message
	// version is the last accepted; nonce the last received on this stream.
	version, nonce string
	// awaiting are the names asked for and not answered yet (Awaiting).
	awaiting map[string]bool
}

func newGRPCState(listeners []string) *grpcState {
	st := &grpcState{types: map[string]*grpcType{}}
	for _, typeURL := range grpcTypes {
		st.types[typeURL] = &grpcType{resources: map[string]proto.Message{}, awaiting: map[string]bool{}}
	}
	lds := st.types[resourcev3.ListenerType]
	lds.names = slices.Sorted(slices.Values(listeners))
	lds.names = slices.Compact(lds.names)
	return st
}

func (st *grpcState) disconnect()               { st.tr = nil }
func (st *grpcState) current(tr transport) bool { return st.tr == tr }
func (st *grpcState) fail(err error)            { st.err = err }

// connect starts a stream: every type with subscriptions is asked for
// again, with the last accepted version and no nonce.
func (st *grpcState) connect(tr transport) {
	st.tr, st.err = tr, nil
	for _, typeURL := range grpcTypes {
		ts := st.types[typeURL]
		ts.nonce = ""
		if len(ts.names) > 0 {
			for _, n := range ts.names {
				if ts.resources[n] == nil {
					ts.awaiting[n] = true
				}
			}
			st.send(typeURL, ts, "")
		}
	}
}

func (st *grpcState) send(typeURL string, ts *grpcType, nack string) {
	r := SentRequest{TypeURL: typeURL, VersionInfo: ts.version, ResponseNonce: ts.nonce,
		ResourceNames: slices.Clone(ts.names), ErrorDetail: nack}
	if r.ResourceNames == nil {
		// An empty list, never a wildcard: the client has unsubscribed
		// from everything of the type.
		r.ResourceNames = []string{}
	}
	r.At = time.Now()
	st.requests = append(st.requests, r)
	if err := st.tr.send(r); err != nil && st.err == nil {
		st.err = err
	}
}

// handle applies one response: ACK or NACK it, then follow what changed.
func (st *grpcState) handle(resp *response) {
	ts := st.types[resp.typeURL]
	if ts == nil {
		return // a type the client never asked for
	}
	ts.nonce = resp.nonce
	valid, failed, err := decodeEach(resp)
	nack := ""
	if err != nil {
		nack = err.Error()
		st.nacks = append(st.nacks, Nack{TypeURL: resp.typeURL, Version: resp.version, Nonce: resp.nonce, Error: nack})
	} else {
		ts.version = resp.version
	}
	fullState := resp.typeURL == resourcev3.ListenerType || resp.typeURL == resourcev3.ClusterType
	for _, name := range ts.names {
		switch m, ok := valid[name]; {
		case ok:
			ts.resources[name] = m
			delete(ts.awaiting, name)
		case failed[name]:
			delete(ts.awaiting, name) // answered, with an error
		case fullState:
			delete(ts.resources, name)
			delete(ts.awaiting, name)
		}
	}
	st.send(resp.typeURL, ts, nack)
	st.follow()
}

// decodeEach splits a response's resources into those that unpack and
// validate, by name, and the names of those that do not validate; the
// error joins every failure, named or not.
func decodeEach(resp *response) (valid map[string]proto.Message, failed map[string]bool, err error) {
	valid, failed = map[string]proto.Message{}, map[string]bool{}
	var errs []error
	for _, r := range resp.resources {
		m, name, err := resp.unpack(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := ValidateDeep(m); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			delete(valid, name)
			failed[name] = true
			continue
		}
		valid[name] = m
		delete(failed, name)
	}
	return valid, failed, errors.Join(errs...)
}

// follow subscribes each type after LDS to what the types before it now
// reference, and unsubscribes from what they no longer do.
func (st *grpcState) follow() {
	lds, rds, cds := st.types[resourcev3.ListenerType], st.types[resourcev3.RouteType], st.types[resourcev3.ClusterType]
	routes, clusters, assignments := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, m := range lds.resources {
		deps, inline := referencesOf(m)
		for _, d := range deps {
			if d.typeURL == resourcev3.RouteType {
				routes[d.name] = true
			}
		}
		for _, c := range inline {
			clusters[c] = true
		}
	}
	st.resubscribe(resourcev3.RouteType, routes)
	for _, m := range rds.resources {
		_, named := referencesOf(m)
		for _, c := range named {
			clusters[c] = true
		}
	}
	st.resubscribe(resourcev3.ClusterType, clusters)
	for _, m := range cds.resources {
		if d, ok := edsDependency(m.(*clusterv3.Cluster)); ok {
			assignments[d.name] = true
		}
	}
	st.resubscribe(resourcev3.EndpointType, assignments)
}

// resubscribe makes want the names of typeURL, dropping what the client
// held of the names it leaves, and asks the server when the set changed.
func (st *grpcState) resubscribe(typeURL string, want map[string]bool) {
	ts := st.types[typeURL]
	names := slices.Sorted(maps.Keys(want))
	if slices.Equal(names, ts.names) {
		return
	}
	for _, n := range names {
		if !slices.Contains(ts.names, n) {
			ts.awaiting[n] = true
		}
	}
	for name := range ts.resources {
		if !want[name] {
			delete(ts.resources, name)
		}
	}
	for name := range ts.awaiting {
		if !want[name] {
			delete(ts.awaiting, name)
		}
	}
	ts.names = names
	st.send(typeURL, ts, "")
}

func (st *grpcState) snapshot() Snapshot {
	snap := Snapshot{
		Clusters: map[string]*clusterv3.Cluster{}, Endpoints: map[string]*endpointv3.ClusterLoadAssignment{},
		Listeners: map[string]*listenerv3.Listener{}, Routes: map[string]*routev3.RouteConfiguration{},
		Secrets: map[string]*tlsv3.Secret{},
	}
	fill := func(typeURL string, put func(name string, m proto.Message)) {
		for name, m := range st.types[typeURL].resources {
			put(name, m)
		}
	}
	fill(resourcev3.ListenerType, func(n string, m proto.Message) { snap.Listeners[n] = m.(*listenerv3.Listener) })
	fill(resourcev3.RouteType, func(n string, m proto.Message) { snap.Routes[n] = m.(*routev3.RouteConfiguration) })
	fill(resourcev3.ClusterType, func(n string, m proto.Message) { snap.Clusters[n] = m.(*clusterv3.Cluster) })
	fill(resourcev3.EndpointType, func(n string, m proto.Message) { snap.Endpoints[n] = m.(*endpointv3.ClusterLoadAssignment) })
	return snap
}
