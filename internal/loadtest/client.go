package loadtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

// Type URLs of the resources the clients follow.
const (
	ClusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	EndpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	ListenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	RouteType    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
)

// Kind is the kind of xDS client to imitate.
type Kind string

// The kinds of client: Envoy sidecars over SotW and delta ADS, Envoy
// routers (gateways) over SotW, and proxyless gRPC (grpc-go's xDS client).
const (
	KindSidecar      Kind = "sidecar"
	KindSidecarDelta Kind = "sidecar-delta"
	KindRouter       Kind = "router"
	KindGRPC         Kind = "grpc"
)

// Client is one xDS client. It follows its configuration as the client it
// imitates does:
//
//   - Envoy (sidecar, router): CDS wildcard first; EDS for every EDS
//     cluster; LDS wildcard once the initial clusters are warm; RDS for
//     every route configuration a listener's HTTP connection manager names.
//     A new or changed EDS cluster warms until its load assignment arrives.
//     SotW re-requests EDS (RDS) with the full set of names, before the CDS
//     (LDS) ACK, whenever a cluster (listener) is added, changed or
//     removed, as Envoy's gRPC mux does; delta sends only changes of the
//     subscribed names.
//   - proxyless gRPC: LDS for its targets by name, then RDS, CDS and EDS by
//     name down the chain; no warming.
//
// Every response is ACKed. After the stream breaks, the client reconnects
// (with a short backoff, not Envoy's) and asks again for everything it
// holds, with the versions it accepted last; delta does not send
// initial_resource_versions, so the server sends everything again.
type Client struct {
	kind      Kind
	node      *corev3.Node
	targets   []string // proxyless: listener names
	delta     bool
	proxyless bool
	dial      func() (*grpc.ClientConn, error)
	cancel    context.CancelFunc
	done      chan struct{}

	mu        sync.Mutex
	conn      *grpc.ClientConn
	endStream context.CancelCauseFunc // ends the current stream
	types     map[string]*subscription
	clusters  map[string]*clusterEntry
	byEDS     map[string][]string // EDS name -> clusters fetching it
	listeners map[string]*listenerEntry
	routes    map[string]uint64 // proxyless: route config -> hash of what it named
	routeRefs map[string][]string
	cdsInit   bool
	nWarming  int    // clusters warming
	gen       uint64 // numbers wildcard responses, to find what one left out

	streams     int       // streams opened so far
	streamStart time.Time // when the current stream was opened
	fullAt      time.Time // when the current stream first held a full config; zero until then
	received    map[string]int
	bytes       int64
	err         error
	expect      *expectation
}

// ClientOptions identify a client.
type ClientOptions struct {
	Kind  Kind
	Index int // unique among the clients of a run; numbers the node
	// Namespace of a sidecar or proxyless client (routers live in
	// istio-system).
	Namespace string
	// Targets are the listener names (host:port) a proxyless client dials.
	Targets []string
}

// agentWindows are the HTTP/2 flow-control windows of the connection that
// actually reaches the control plane from an Envoy sidecar or gateway: the
// injected istio-proxy container runs Istio's pilot-agent, whose xDS proxy
// relays Envoy's ADS stream over a grpc-go connection of its own, dialled
// with 1 MiB stream and connection windows (istio-agent's
// defaultInitialWindowSize and defaultInitialConnWindowSize). A fixed
// window also turns off grpc-go's bandwidth-delay probing, which the
// tool's clients would otherwise run and the agent does not. Proxyless
// clients are grpc-go itself, with its defaults.
var agentWindows = []grpc.DialOption{
	grpc.WithInitialWindowSize(1 << 20),
	grpc.WithInitialConnWindowSize(1 << 20),
}

// NewClient dials addr; the ADS stream opens with Start.
func NewClient(addr string, o ClientOptions) (*Client, error) {
	node, err := clientNode(o)
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1 << 30)),
		// Reconnect attempts at most 250 ms apart: the reconnect phase
		// measures the control plane, and a long backoff (Envoy's grows to
		// 30 s) would measure the client's wait instead.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 250 * time.Millisecond},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
	if o.Kind != KindGRPC {
		opts = append(opts, agentWindows...)
	}
	dial := func() (*grpc.ClientConn, error) {
		conn, err := grpc.NewClient(addr, opts...)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		return conn, nil
	}
	conn, err := dial()
	if err != nil {
		return nil, err
	}
	c := &Client{
		kind: o.Kind, node: node, targets: o.Targets, dial: dial, conn: conn,
		delta: o.Kind == KindSidecarDelta, proxyless: o.Kind == KindGRPC,
		types:     map[string]*subscription{},
		clusters:  map[string]*clusterEntry{},
		byEDS:     map[string][]string{},
		listeners: map[string]*listenerEntry{},
		routes:    map[string]uint64{},
		routeRefs: map[string][]string{},
		received:  map[string]int{},
		done:      make(chan struct{}),
	}
	for _, u := range []string{ClusterType, EndpointType, ListenerType, RouteType} {
		c.types[u] = &subscription{url: u, names: map[string]*subName{}, sent: map[string]bool{}}
	}
	return c, nil
}

func clientNode(o ClientOptions) (*corev3.Node, error) {
	ip := fmt.Sprintf("10.200.%d.%d", o.Index/250, o.Index%250+1)
	ns := o.Namespace
	meta := map[string]any{"INSTANCE_IPS": ip}
	var id string
	switch o.Kind {
	case KindSidecar, KindSidecarDelta, KindGRPC:
		if ns == "" {
			return nil, errors.New("a sidecar or gRPC client needs a namespace")
		}
		id = fmt.Sprintf("sidecar~%s~load-%d.%s~%s.svc.cluster.local", ip, o.Index, ns, ns)
		meta["LABELS"] = map[string]any{"app": "load-client"}
		if o.Kind == KindGRPC {
			meta["GENERATOR"] = "grpc"
			if len(o.Targets) == 0 {
				return nil, errors.New("a gRPC client needs at least one target")
			}
		}
	case KindRouter:
		ns = meshNamespace
		id = fmt.Sprintf("router~%s~gateway-%d.%s~%s.svc.cluster.local", ip, o.Index, ns, ns)
		meta["LABELS"] = map[string]any{"istio": "ingressgateway"}
	default:
		return nil, fmt.Errorf("unknown client kind %q", o.Kind)
	}
	meta["NAMESPACE"] = ns
	st, err := structpb.NewStruct(meta)
	if err != nil {
		return nil, err
	}
	return &corev3.Node{Id: id, Metadata: st}, nil
}

// Start opens the stream and keeps it open, reconnecting when it breaks,
// until Close.
func (c *Client) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go c.run(ctx)
}

// Close ends the stream and the connection.
func (c *Client) Close() {
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.conn.Close()
}

// errRejoin ends a stream that Rejoin replaces.
var errRejoin = errors.New("rejoining on a new connection")

// Rejoin drops the client's connection and opens a new one, with a new
// stream, at once: what a proxy does when its connection breaks, or when
// the server ends it at its maximum age (a GOAWAY). The new stream asks
// for everything the client holds, as after any break.
func (c *Client) Rejoin() error {
	conn, err := c.dial()
	if err != nil {
		return err
	}
	c.mu.Lock()
	old, end := c.conn, c.endStream
	c.conn = conn
	c.mu.Unlock()
	if end != nil {
		end(errRejoin)
	}
	return old.Close()
}

func (c *Client) run(ctx context.Context) {
	defer close(c.done)
	for ctx.Err() == nil {
		err := c.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errRejoin) {
			continue // no backoff: the break was the client's own
		}
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stats is what a client has received so far.
type Stats struct {
	Responses map[string]int // by type URL
	Bytes     int64
	Streams   int
}

// Stats returns a copy of the client's counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := Stats{Responses: make(map[string]int, len(c.received)), Bytes: c.bytes, Streams: c.streams}
	for k, v := range c.received {
		out.Responses[k] = v
	}
	return out
}

// Full returns the stream count and when the current stream first held a
// full config (zero if not yet).
func (c *Client) Full() (streams int, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams, c.fullAt
}

// Err is the last error that broke the stream, if any.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Kind is the kind of client.
func (c *Client) Kind() Kind { return c.kind }

// Holds reports whether the client subscribes to the given resource (a
// cluster, or an EDS name).
func (c *Client) Holds(typeURL, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	sub := c.types[typeURL]
	if sub.wildcard {
		return true
	}
	return sub.names[name] != nil
}

// Summary describes the client's state, for errors about clients that did
// not get there.
func (c *Client) Summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	missing := 0
	for _, sub := range c.types {
		missing += len(sub.names) - sub.nGot
	}
	return fmt.Sprintf("%s %s: %d clusters (%d warming), %d listeners, %d named resources not received, last error: %v",
		c.kind, c.node.GetId(), len(c.clusters), c.warmingCount(), len(c.listeners), missing, c.err)
}
