package xds

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// waitLimit only guards against hangs; no test asserts on timing.
const waitLimit = 10 * time.Second

// Type URLs of the test-only generators. probeType echoes one StringValue
// per subscribed name (a barrier: see barrier); bulkType sends one large
// value that changes with every push context.
var (
	probeType = "type.googleapis.com/google.protobuf.StringValue"
	bulkType  = "type.googleapis.com/google.protobuf.BytesValue"
)

type harnessConfig struct {
	debounceAfter time.Duration
	debounceMax   time.Duration
	sendTimeout   time.Duration
	maxNames      int // Options.MaxSubscribedNames
	// maxSyncs is Options.MaxConcurrentSyncs.
	maxSyncs int
	seed     func(model.Store)
	// manualStart leaves calling start to the test.
	manualStart bool
	// noStoreHandler leaves pushes to the test (benchmarks push directly).
	noStoreHandler bool
	// generators, when set, is the generator set of every proxy instead of
	// the recording fakes; generatorsFor picks a set per proxy.
	generators    map[string]Generator
	generatorsFor func(*model.Proxy) map[string]Generator
	// authenticate is Options.Authenticate.
	authenticate func(context.Context) (*model.Identity, error)
}

type harness struct {
	t       testing.TB
	store   model.Store
	server  *Server
	reg     *prometheus.Registry
	gens    *fakeGenerators
	client  discoveryv3.AggregatedDiscoveryServiceClient
	conn    *grpc.ClientConn
	ctx     context.Context
	started chan struct{}
	cancel  context.CancelFunc

	startFunc func()
	lis       *bufconn.Listener
}

func newHarness(t testing.TB, cfg harnessConfig) *harness {
	t.Helper()
	if cfg.debounceAfter == 0 {
		cfg.debounceAfter = 5 * time.Millisecond
	}
	if cfg.debounceMax == 0 {
		cfg.debounceMax = time.Second
	}
	h := &harness{t: t, store: model.NewStore(), reg: prometheus.NewRegistry(), gens: newFakeGenerators(),
		started: make(chan struct{})}
	generators := h.gens.forProxy
	switch {
	case cfg.generatorsFor != nil:
		generators = cfg.generatorsFor
	case cfg.generators != nil:
		generators = func(*model.Proxy) map[string]Generator { return cfg.generators }
	}
	h.server = NewServer(Options{
		Store:              h.store,
		PushContext:        pushcontext.Options{DomainSuffix: "cluster.local", RootNamespace: "istio-system"},
		Generators:         generators,
		DebounceAfter:      cfg.debounceAfter,
		DebounceMax:        cfg.debounceMax,
		SendTimeout:        cfg.sendTimeout,
		MaxSubscribedNames: cfg.maxNames,
		MaxConcurrentSyncs: cfg.maxSyncs,
		Authenticate:       cfg.authenticate,
		Metrics:            NewMetrics(h.reg),
	})
	if !cfg.noStoreHandler {
		h.store.OnChange(h.server.ConfigChanged)
	}
	if cfg.seed != nil {
		cfg.seed(h.store)
	}

	h.lis = bufconn.Listen(256 << 10)
	g := grpc.NewServer(ServerOptions()...)
	h.server.Register(g)
	go func() { _ = g.Serve(h.lis) }()
	conn := h.dial()
	h.conn = conn
	h.client = discoveryv3.NewAggregatedDiscoveryServiceClient(conn)

	var loopCtx context.Context
	loopCtx, h.cancel = context.WithCancel(context.Background())
	h.ctx = loopCtx
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = conn.Close()
		h.server.Stop()
		h.cancel()
		select {
		case <-h.started:
			<-done
		default:
		}
		g.Stop()
	})
	h.startFunc = func() {
		close(h.started)
		go func() {
			defer close(done)
			h.server.Start(loopCtx)
		}()
	}
	if !cfg.manualStart {
		h.start()
	}
	return h
}

func (h *harness) start() { h.startFunc() }

// pushNow pushes req at once (bypassing debounce) and waits until every
// connection has taken it from its queue. A connection handles its queue and
// its requests on one goroutine, so a barrier sent afterwards is answered
// only after the push's responses.
func (h *harness) pushNow(req *model.PushRequest) {
	h.t.Helper()
	h.server.push(req)
	h.eventually("every connection to take the push", func() bool {
		for _, c := range h.server.connections() {
			c.queue.mu.Lock()
			pending := c.queue.pending
			c.queue.mu.Unlock()
			if pending != nil {
				return false
			}
		}
		return true
	})
}

// dial opens another client connection to the server.
func (h *harness) dial(opts ...grpc.DialOption) *grpc.ClientConn {
	h.t.Helper()
	opts = append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return h.lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, opts...)
	conn, err := grpc.NewClient("passthrough:///bufnet", opts...)
	if err != nil {
		h.t.Fatal(err)
	}
	return conn
}

// eventually polls cond until it holds; it fails the test after waitLimit.
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	h.eventuallyWithin(what, waitLimit, cond)
}

func (h *harness) eventuallyWithin(what string, limit time.Duration, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (h *harness) gauge(g *prometheus.GaugeVec, label string) float64 {
	h.t.Helper()
	var m dto.Metric
	if err := g.WithLabelValues(label).Write(&m); err != nil {
		h.t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

func (h *harness) counter(c *prometheus.CounterVec, label string) float64 {
	h.t.Helper()
	var m dto.Metric
	if err := c.WithLabelValues(label).Write(&m); err != nil {
		h.t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// --- fixtures ---

const domain = "svc.cluster.local"

func hostname(name string) string { return name + ".default." + domain }

func addService(s model.Store, name string, ips ...string) {
	s.UpsertService(&model.Service{
		Name: name, Namespace: "default", Hostname: hostname(name),
		Ports: []*model.Port{{Name: "grpc", Port: 8080, Protocol: model.ProtocolGRPC, TargetPort: 8080}},
	})
	setEndpoints(s, name, ips...)
}

func setEndpoints(s model.Store, name string, ips ...string) {
	eps := make([]*model.Endpoint, len(ips))
	for i, ip := range ips {
		eps[i] = &model.Endpoint{Address: ip, Port: 8080, ServicePortName: "grpc", Namespace: "default"}
	}
	s.SetEndpoints(model.NamespacedName{Namespace: "default", Name: name}, name+"-slice", eps)
}

// --- fake generators: pure functions of the push context and the watch ---

type fakeGenerators struct {
	mu    sync.Mutex
	calls map[string]int                  // by proxy ID and short type
	reqs  map[string][]*model.PushRequest // requests seen, by proxy ID and short type
	// set is the one generator set every proxy gets, as in production, so
	// identical proxies share generations. Only the proxy that generated a
	// shared result is recorded.
	set map[string]Generator
}

func newFakeGenerators() *fakeGenerators {
	f := &fakeGenerators{calls: map[string]int{}, reqs: map[string][]*model.PushRequest{}}
	wrap := func(typeURL string, gen func(*model.Proxy, *pushcontext.PushContext, *model.WatchedResource, *model.PushRequest) model.Resources) Generator {
		return &recordingGenerator{f: f, typeURL: typeURL, gen: gen}
	}
	f.set = map[string]Generator{
		ClusterType:  wrap(ClusterType, genClusters),
		EndpointType: wrap(EndpointType, genEndpoints),
		ListenerType: wrap(ListenerType, genListeners),
		probeType:    wrap(probeType, genProbe),
		// A func generator cannot be compared, so it is never shared.
		RouteType: GeneratorFunc(func(*model.Proxy, *pushcontext.PushContext, *model.WatchedResource, *model.PushRequest) (model.Resources, error) {
			return nil, errors.New("routes are broken in this test")
		}),
		bulkType: wrap(bulkType, genBulk),
	}
	return f
}

func (f *fakeGenerators) count(proxyID, typeURL string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[proxyID+"|"+shortType(typeURL)]
}

func (f *fakeGenerators) record(proxy *model.Proxy, typeURL string, req *model.PushRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[proxy.ID+"|"+shortType(typeURL)]++
	f.reqs[proxy.ID+"|"+shortType(typeURL)] = append(f.reqs[proxy.ID+"|"+shortType(typeURL)], req)
}

func (f *fakeGenerators) requests(proxyID, typeURL string) []*model.PushRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs[proxyID+"|"+shortType(typeURL)])
}

func (f *fakeGenerators) forProxy(*model.Proxy) map[string]Generator { return f.set }

// recordingGenerator records every call, then generates with gen.
type recordingGenerator struct {
	f       *fakeGenerators
	typeURL string
	gen     func(*model.Proxy, *pushcontext.PushContext, *model.WatchedResource, *model.PushRequest) model.Resources
}

func (g *recordingGenerator) Generate(p *model.Proxy, pc *pushcontext.PushContext, w *model.WatchedResource, req *model.PushRequest) (model.Resources, error) {
	g.f.record(p, g.typeURL, req)
	return g.gen(p, pc, w, req), nil
}

func mustAny(m proto.Message) *anypb.Any {
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic(err)
	}
	return a
}

func genClusters(_ *model.Proxy, pc *pushcontext.PushContext, _ *model.WatchedResource, _ *model.PushRequest) model.Resources {
	var out model.Resources
	for _, svc := range pc.Services() {
		out = append(out, model.Resource{Name: svc.Hostname, Resource: mustAny(&clusterv3.Cluster{
			Name:                 svc.Hostname,
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		})})
	}
	return out
}

func genListeners(_ *model.Proxy, pc *pushcontext.PushContext, _ *model.WatchedResource, _ *model.PushRequest) model.Resources {
	var out model.Resources
	for _, svc := range pc.Services() {
		out = append(out, model.Resource{Name: svc.Hostname, Resource: mustAny(&listenerv3.Listener{Name: svc.Hostname})})
	}
	return out
}

// genEndpoints is partial on endpoint-only requests, like the real EDS
// generator: only services whose endpoints the request names.
func genEndpoints(_ *model.Proxy, pc *pushcontext.PushContext, _ *model.WatchedResource, req *model.PushRequest) model.Resources {
	var out model.Resources
	for _, svc := range pc.Services() {
		key := model.ConfigKey{Kind: model.KindEndpoints, Namespace: svc.Namespace, Name: svc.Name}
		if _, touched := req.ConfigsUpdated[key]; !req.Full && !touched {
			continue
		}
		cla := &endpointv3.ClusterLoadAssignment{ClusterName: svc.Hostname}
		var lbs []*endpointv3.LbEndpoint
		for _, ep := range pc.Endpoints(svc.Hostname, svc.Ports[0].Port, nil) {
			lbs = append(lbs, &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{
				Endpoint: &endpointv3.Endpoint{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
					SocketAddress: &corev3.SocketAddress{Address: ep.Address, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: ep.Port}},
				}}},
			}})
		}
		cla.Endpoints = []*endpointv3.LocalityLbEndpoints{{LbEndpoints: lbs, LoadBalancingWeight: wrapperspb.UInt32(1)}}
		out = append(out, model.Resource{Name: svc.Hostname, Resource: mustAny(cla)})
	}
	return out
}

func genProbe(_ *model.Proxy, _ *pushcontext.PushContext, w *model.WatchedResource, _ *model.PushRequest) model.Resources {
	var out model.Resources
	for _, name := range w.ResourceNames {
		out = append(out, model.Resource{Name: name, Resource: mustAny(wrapperspb.String(name))})
	}
	return out
}

func genBulk(_ *model.Proxy, pc *pushcontext.PushContext, _ *model.WatchedResource, _ *model.PushRequest) model.Resources {
	payload := []byte(strings.Repeat(pc.Version()+"|", (1<<20)/(len(pc.Version())+1)))
	return model.Resources{{Name: "bulk", Resource: mustAny(wrapperspb.Bytes(payload))}}
}

// --- test clients ---

func nodeFor(name string) *corev3.Node {
	return nodeIn(name, "default", nil)
}

// nodeIn is the node of a proxy called name in namespace ns.
func nodeIn(name, ns string, locality *corev3.Locality) *corev3.Node {
	meta, err := structpb.NewStruct(map[string]any{
		"GENERATOR": "grpc", "NAMESPACE": ns,
		"LABELS": map[string]any{"app": name},
	})
	if err != nil {
		panic(err)
	}
	return &corev3.Node{Id: "sidecar~10.0.0.1~" + name + "." + ns + "~" + ns + ".svc.cluster.local", Metadata: meta, Locality: locality}
}

func proxyID(name string) string {
	return "sidecar~10.0.0.1~" + name + ".default~default.svc.cluster.local"
}

func names(rs []*anypb.Any, decode func(*anypb.Any) string) []string {
	var out []string
	for _, r := range rs {
		out = append(out, decode(r))
	}
	slices.Sort(out)
	return out
}

// resourceName extracts the name of the resource types the fakes produce.
func resourceName(a *anypb.Any) string {
	m, err := a.UnmarshalNew()
	if err != nil {
		panic(err)
	}
	switch r := m.(type) {
	case *clusterv3.Cluster:
		return r.GetName()
	case *listenerv3.Listener:
		return r.GetName()
	case *endpointv3.ClusterLoadAssignment:
		return r.GetClusterName()
	case *routev3.RouteConfiguration:
		return r.GetName()
	case *wrapperspb.StringValue:
		return r.GetValue()
	}
	return fmt.Sprintf("%T", m)
}

type sotwClient struct {
	h         *harness
	name      string
	node      *corev3.Node // nodeFor(name) unless set
	stream    grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]
	responses chan *discoveryv3.DiscoveryResponse
	errs      chan error
	sentNode  bool
	probes    int
}

func (h *harness) sotw(name string) *sotwClient {
	h.t.Helper()
	return h.sotwAs(name, nil)
}

// sotwAs opens a SotW stream for a proxy with the given node (nodeFor(name)
// when nil).
func (h *harness) sotwAs(name string, node *corev3.Node) *sotwClient {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	stream, err := h.client.StreamAggregatedResources(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	c := &sotwClient{h: h, name: name, node: node, stream: stream}
	c.responses, c.errs = receive(stream.Recv)
	return c
}

func (c *sotwClient) send(req *discoveryv3.DiscoveryRequest) {
	c.h.t.Helper()
	if !c.sentNode {
		// gRPC clients send the node only on a stream's first request.
		req.Node = c.node
		if req.Node == nil {
			req.Node = nodeFor(c.name)
		}
		c.sentNode = true
	}
	if err := c.stream.Send(req); err != nil {
		c.h.t.Fatalf("send: %v", err)
	}
}

func (c *sotwClient) recv() *discoveryv3.DiscoveryResponse {
	c.h.t.Helper()
	return c.recvWithin(waitLimit)
}

func (c *sotwClient) recvWithin(d time.Duration) *discoveryv3.DiscoveryResponse {
	c.h.t.Helper()
	select {
	case r := <-c.responses:
		return r
	case err := <-c.errs:
		c.h.t.Fatalf("stream ended: %v", err)
	case <-time.After(d):
		c.h.t.Fatalf("no response within %v", d)
	}
	return nil
}

// expect receives the next response and checks its type.
func (c *sotwClient) expect(typeURL string) *discoveryv3.DiscoveryResponse {
	c.h.t.Helper()
	return c.expectWithin(typeURL, waitLimit)
}

func (c *sotwClient) expectWithin(typeURL string, d time.Duration) *discoveryv3.DiscoveryResponse {
	c.h.t.Helper()
	r := c.recvWithin(d)
	if r.GetTypeUrl() != typeURL {
		c.h.t.Fatalf("got a %s response (%v), want %s", shortType(r.GetTypeUrl()), names(r.GetResources(), resourceName), shortType(typeURL))
	}
	return r
}

func (c *sotwClient) subscribe(typeURL string, resourceNames ...string) *discoveryv3.DiscoveryResponse {
	c.h.t.Helper()
	c.send(&discoveryv3.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: resourceNames})
	return c.expect(typeURL)
}

func (c *sotwClient) ack(r *discoveryv3.DiscoveryResponse, resourceNames ...string) {
	c.h.t.Helper()
	c.send(&discoveryv3.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(),
		ResponseNonce: r.GetNonce(), ResourceNames: resourceNames})
}

// barrier subscribes to a fresh probe name and returns every other response
// received before the probe's answer. The server handles a stream's
// requests and pushes in order, so whatever it was doing before is finished.
func (c *sotwClient) barrier() []*discoveryv3.DiscoveryResponse {
	c.h.t.Helper()
	c.probes++
	probe := fmt.Sprintf("probe-%d", c.probes)
	c.send(&discoveryv3.DiscoveryRequest{TypeUrl: probeType, ResourceNames: []string{probe}})
	var others []*discoveryv3.DiscoveryResponse
	for {
		r := c.recv()
		if r.GetTypeUrl() == probeType && slices.Contains(names(r.GetResources(), resourceName), probe) {
			return others
		}
		others = append(others, r)
	}
}

// expectQuiet checks that nothing but the barrier's own answer arrives.
func (c *sotwClient) expectQuiet(what string) {
	c.h.t.Helper()
	if others := c.barrier(); len(others) > 0 {
		var got []string
		for _, r := range others {
			got = append(got, fmt.Sprintf("%s%v", shortType(r.GetTypeUrl()), names(r.GetResources(), resourceName)))
		}
		c.h.t.Fatalf("%s: unexpected responses %v", what, got)
	}
}

// streamError waits for the stream to end and returns its error.
func (c *sotwClient) streamError() error {
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

func serviceKey(name string) model.NamespacedName {
	return model.NamespacedName{Namespace: "default", Name: name}
}

// receive pumps a stream's responses into a channel, and its first error
// into another, so tests can wait for either with a timeout.
func receive[T any](recv func() (T, error)) (chan T, chan error) {
	responses, errs := make(chan T, 100), make(chan error, 1)
	go func() {
		for {
			resp, err := recv()
			if err != nil {
				errs <- err
				return
			}
			responses <- resp
		}
	}()
	return responses, errs
}
