package loadtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"slices"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
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

const (
	adsSotW  = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
	adsDelta = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
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

var hashSeed = maphash.MakeSeed()

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

// subscription is the client's state of one type.
type subscription struct {
	url      string
	wildcard bool
	on       bool
	names    map[string]*subName // not for wildcards
	nGot     int                 // names received on the current stream
	sent     map[string]bool     // delta: names the server was told about
	// wire is resource_names encoded (field 3 of DiscoveryRequest, sorted),
	// rebuilt only when the set of names changes: a SotW client repeats
	// thousands of EDS names in every ACK, and sorting and marshalling them
	// each time made the tool cost more than the server.
	wire      []byte
	wireOK    bool
	responded bool // a response arrived on the current stream
	version   string
	nonce     string
}

// subName is one subscribed name. It is a pointer so that a name found by
// string(bytes), which does not allocate, can be marked received: a map
// assignment would allocate the key, 20,000 times per EDS client and stream.
type subName struct {
	refs int
	got  bool // received on the current stream
}

type clusterEntry struct {
	edsName string
	hash    uint64
	warming bool
	gen     uint64 // the last response that held it
}

type listenerEntry struct {
	hash   uint64
	routes []string
	gen    uint64
}

func (c *Client) setWarming(e *clusterEntry, w bool) {
	if e.warming != w {
		e.warming = w
		if w {
			c.nWarming++
		} else {
			c.nWarming--
		}
	}
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

// begin is the first request of the first stream.
func (c *Client) begin() []pending {
	if c.proxyless {
		lds := c.types[ListenerType]
		lds.on = true
		for _, t := range c.targets {
			c.ref(ListenerType, t, 1)
		}
		return []pending{c.request(lds, "")}
	}
	cds := c.types[ClusterType]
	cds.on, cds.wildcard = true, true
	return []pending{c.request(cds, "")}
}

// resubscribe asks a new stream for every subscribed type, in Envoy's
// order: clusters and their endpoints before listeners and their routes.
func (c *Client) resubscribe() []pending {
	var out []pending
	for _, u := range []string{ClusterType, EndpointType, ListenerType, RouteType} {
		if sub := c.types[u]; sub.on {
			out = append(out, c.request(sub, ""))
		}
	}
	return out
}

// request is a request for sub's current subscription: SotW repeats the
// full set of names with the last accepted version; delta sends the
// difference to what the server was told.
func (c *Client) request(sub *subscription, nonce string) pending {
	p := pending{url: sub.url, version: sub.version, nonce: nonce, wildcard: sub.wildcard}
	if !c.delta {
		if !sub.wildcard {
			p.namesWire = sub.namesWire()
		}
		return p
	}
	if sub.wildcard {
		// The first delta request of a wildcard subscription names nothing.
		return p
	}
	for n := range sub.names {
		if !sub.sent[n] {
			p.subscribe = append(p.subscribe, n)
			sub.sent[n] = true
		}
	}
	for n := range sub.sent {
		if sub.names[n] == nil {
			p.unsubscribe = append(p.unsubscribe, n)
			delete(sub.sent, n)
		}
	}
	slices.Sort(p.subscribe)
	slices.Sort(p.unsubscribe)
	return p
}

// changed reports whether a delta subscription has increments to send.
func (c *Client) changed(sub *subscription) bool {
	if !sub.on || sub.wildcard {
		return false
	}
	for n := range sub.names {
		if !sub.sent[n] {
			return true
		}
	}
	for n := range sub.sent {
		if sub.names[n] == nil {
			return true
		}
	}
	return false
}

// namesWire is the cached encoding of the subscribed names; the returned
// slice is never modified afterwards.
func (sub *subscription) namesWire() []byte {
	if !sub.wireOK {
		names := sortedKeys(sub.names)
		size := 0
		for _, n := range names {
			size += protowire.SizeTag(reqResourceNames) + protowire.SizeBytes(len(n))
		}
		b := make([]byte, 0, size)
		for _, n := range names {
			b = protowire.AppendTag(b, reqResourceNames, protowire.BytesType)
			b = protowire.AppendString(b, n)
		}
		sub.wire, sub.wireOK = b, true
	}
	return sub.wire
}

func sortedKeys(m map[string]*subName) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (c *Client) ref(url, name string, delta int) {
	sub := c.types[url]
	sub.on = true
	n := sub.names[name]
	before := 0
	if n != nil {
		before = n.refs
	}
	after := before + delta
	if (before > 0) != (after > 0) {
		sub.wireOK = false
	}
	switch {
	case after <= 0 && n != nil:
		if n.got {
			sub.nGot--
		}
		delete(sub.names, name)
	case after > 0 && n == nil:
		sub.names[name] = &subName{refs: after}
	case after > 0:
		n.refs = after
	}
}

// handle applies a response and returns the requests it causes: the
// re-requests of dependent types first, then the ACK.
func (c *Client) handle(r *response) []pending {
	sub := c.types[r.typeURL]
	if sub == nil || !sub.on {
		return nil // Envoy ignores types it did not ask for.
	}
	sub.responded, sub.nonce, sub.version = true, r.nonce, r.version
	if !sub.wildcard {
		for _, res := range r.resources {
			if n := sub.names[string(res.name)]; n != nil && !n.got {
				n.got = true
				sub.nGot++
			}
		}
	}
	var out []pending
	switch r.typeURL {
	case ClusterType:
		out = c.onClusters(r)
	case EndpointType:
		c.onEndpoints(r)
	case ListenerType:
		out = c.onListeners(r)
	case RouteType:
		out = c.onRoutes(r)
	}
	out = append(out, c.ack(sub, r.nonce))
	if !c.proxyless && !c.cdsInit && c.types[ClusterType].responded && c.warmingCount() == 0 {
		// Cluster initialization is over: LDS starts, after the ACK.
		c.cdsInit = true
		lds := c.types[ListenerType]
		lds.on, lds.wildcard = true, true
		out = append(out, c.request(lds, ""))
	}
	if c.fullAt.IsZero() && c.full() {
		c.fullAt = time.Now()
	}
	return out
}

func (c *Client) ack(sub *subscription, nonce string) pending {
	p := c.request(sub, nonce)
	p.ack = true
	return p
}

func (c *Client) warmingCount() int { return c.nWarming }

// full reports whether the current stream delivered everything subscribed:
// the wildcard types answered, every named resource received, and for
// Envoy, listeners subscribed and no cluster warming.
func (c *Client) full() bool {
	if !c.proxyless && !c.types[ListenerType].on {
		return false
	}
	for _, sub := range c.types {
		if sub.wildcard {
			if !sub.responded {
				return false
			}
			continue
		}
		// nGot counts subscribed names only (ref uncounts a name it
		// drops), so equal counts mean all arrived.
		if sub.nGot < len(sub.names) {
			return false
		}
	}
	return c.warmingCount() == 0
}

func (c *Client) onClusters(r *response) []pending {
	c.gen++
	c.reserve(len(r.resources))
	edsChanged := false
	for _, res := range r.resources {
		// Most clusters of a response are unchanged: a lookup and a hash,
		// no decoding and no allocation.
		h := maphash.Bytes(hashSeed, res.value)
		e := c.clusters[string(res.name)]
		if e != nil {
			e.gen = c.gen
			if e.hash == h {
				continue
			}
		}
		ci, err := skimCluster(res.value)
		if err != nil {
			continue
		}
		name := string(res.name)
		if e == nil {
			e = &clusterEntry{gen: c.gen}
			c.clusters[name] = e
		}
		if e.edsName != string(ci.edsName) {
			if e.edsName != "" {
				c.unrefEDS(name, e.edsName)
			}
			e.edsName = ""
			if len(ci.edsName) > 0 {
				// Istio names a cluster's endpoints after the cluster: one
				// string serves both, in every map that keys on them.
				e.edsName = name
				if !bytes.Equal(ci.edsName, res.name) {
					e.edsName = string(ci.edsName)
				}
				c.byEDS[e.edsName] = append(c.byEDS[e.edsName], name)
				c.ref(EndpointType, e.edsName, 1)
			}
		}
		e.hash = h
		// grpc-go uses a cluster at once; Envoy warms it until its load
		// assignment arrives.
		c.setWarming(e, e.edsName != "" && !c.proxyless)
		if e.edsName != "" {
			edsChanged = true
		}
		c.checkCluster(name, res.value, e)
	}
	removed := r.removed
	if !c.delta && !c.proxyless {
		// A SotW wildcard response holds every cluster: the rest are gone.
		for name, e := range c.clusters {
			if e.gen != c.gen {
				removed = append(removed, name)
			}
		}
	}
	for _, name := range removed {
		if e := c.clusters[name]; e != nil {
			if e.edsName != "" {
				c.unrefEDS(name, e.edsName)
				edsChanged = true
			}
			c.setWarming(e, false)
			delete(c.clusters, name)
		}
	}
	eds := c.types[EndpointType]
	if c.delta {
		if c.changed(eds) {
			return []pending{c.request(eds, eds.nonce)}
		}
		return nil
	}
	if edsChanged && eds.on {
		return []pending{c.request(eds, eds.nonce)}
	}
	return nil
}

// reserve sizes the maps that the first response of n clusters fills: grown
// one cluster at a time, they were a fifth of a client's CPU in a connect
// storm. Maps that already hold something are left as they are.
func (c *Client) reserve(n int) {
	if len(c.clusters) > 0 {
		return
	}
	c.clusters = make(map[string]*clusterEntry, n)
	c.byEDS = make(map[string][]string, n)
	if eds := c.types[EndpointType]; len(eds.names) == 0 {
		eds.names = make(map[string]*subName, n)
		if c.delta { // only delta tells the server names one by one
			eds.sent = make(map[string]bool, n)
		}
	}
}

func (c *Client) unrefEDS(cluster, eds string) {
	c.byEDS[eds] = slices.DeleteFunc(c.byEDS[eds], func(s string) bool { return s == cluster })
	if len(c.byEDS[eds]) == 0 {
		delete(c.byEDS, eds)
	}
	c.ref(EndpointType, eds, -1)
}

func (c *Client) onEndpoints(r *response) {
	for _, res := range r.resources {
		if c.nWarming > 0 {
			for _, cl := range c.byEDS[string(res.name)] {
				if e := c.clusters[cl]; e != nil && e.warming {
					c.setWarming(e, false)
					c.checkWarm(cl)
				}
			}
		}
		if x := c.expect; x != nil && x.kind == expectEndpoint && x.at.IsZero() && string(res.name) == x.name {
			if ok, _ := claHasAddress(res.value, x.addr); ok {
				c.satisfy()
			}
		}
	}
}

func (c *Client) onListeners(r *response) []pending {
	c.gen++
	routesChanged := false
	for _, res := range r.resources {
		h := maphash.Bytes(hashSeed, res.value)
		e := c.listeners[string(res.name)]
		if e != nil {
			e.gen = c.gen
			if e.hash == h {
				continue
			}
		}
		routes, err := listenerRoutes(res.value)
		if err != nil {
			continue
		}
		if e == nil {
			e = &listenerEntry{gen: c.gen}
			c.listeners[string(res.name)] = e
		}
		for _, rt := range e.routes {
			c.ref(RouteType, rt, -1)
		}
		for _, rt := range routes {
			c.ref(RouteType, rt, 1)
		}
		e.hash, e.routes = h, routes
		routesChanged = true
	}
	removed := r.removed
	if !c.delta && !c.proxyless {
		for name, e := range c.listeners {
			if e.gen != c.gen {
				removed = append(removed, name)
			}
		}
	}
	for _, name := range removed {
		if e := c.listeners[name]; e != nil {
			for _, rt := range e.routes {
				c.ref(RouteType, rt, -1)
			}
			delete(c.listeners, name)
			routesChanged = true
		}
	}
	rds := c.types[RouteType]
	if c.delta {
		if c.changed(rds) {
			return []pending{c.request(rds, rds.nonce)}
		}
		return nil
	}
	if routesChanged && rds.on {
		return []pending{c.request(rds, rds.nonce)}
	}
	return nil
}

// onRoutes follows a proxyless client's routes to the clusters they name;
// Envoy fetches its clusters by wildcard and needs nothing from them.
func (c *Client) onRoutes(r *response) []pending {
	if !c.proxyless {
		return nil
	}
	changed := false
	for _, res := range r.resources {
		h := maphash.Bytes(hashSeed, res.value)
		if old, ok := c.routes[string(res.name)]; ok && old == h {
			continue
		}
		cls, err := routeClusters(res.value)
		if err != nil {
			continue
		}
		name := string(res.name)
		for _, cl := range c.routeRefs[name] {
			c.ref(ClusterType, cl, -1)
		}
		for _, cl := range cls {
			c.ref(ClusterType, cl, 1)
		}
		c.routes[name], c.routeRefs[name] = h, cls
		changed = true
	}
	if !changed {
		return nil
	}
	cds := c.types[ClusterType]
	return []pending{c.request(cds, cds.nonce)}
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
