package xdstest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// ecWaitLimit guards against hangs only; no test asserts on timing with it.
const ecWaitLimit = 10 * time.Second

// scriptedADS is an ADS server whose every response the test writes by
// hand, so that a test can check the client's protocol logic request by
// request. It serves one stream at a time, of either mode: responses go to
// the stream opened last.
type scriptedADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	t     *testing.T
	mode  Mode
	reqs  chan got
	nonce int

	mu      sync.Mutex
	out     chan any // the responses of the stream opened last
	streams int
}

// got is a request as the server received it, of either mode.
type got struct {
	typeURL, version, nonce string
	names, sub, unsub       []string
	initial                 map[string]string // initial_resource_versions
	errorDetail             string
	node                    bool
}

func (g got) String() string {
	return fmt.Sprintf("{%s version=%q nonce=%q names=%v sub=%v unsub=%v initial=%v error=%q}",
		shortType(g.typeURL), g.version, g.nonce, g.names, g.sub, g.unsub, g.initial, g.errorDetail)
}

// startScripted serves a scriptedADS and connects an EnvoyClient to it.
func startScripted(t *testing.T, mode Mode) (*scriptedADS, *EnvoyClient) {
	t.Helper()
	s, conn := serveScripted(t, mode)
	return s, NewEnvoyClient(t, conn, testNode(), mode)
}

// serveScripted serves a scriptedADS and returns a connection to it.
func serveScripted(t *testing.T, mode Mode) (*scriptedADS, *grpc.ClientConn) {
	t.Helper()
	s := &scriptedADS{t: t, mode: mode, reqs: make(chan got, 100), out: make(chan any, 100)}
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, s)
	go func() { _ = g.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///scripted",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(); g.Stop() })
	return s, conn
}

// testNode is a sidecar's node as Istio's agent sends it.
func testNode() *corev3.Node {
	meta, _ := structpb.NewStruct(map[string]any{"NAMESPACE": "ns", "INSTANCE_IPS": "10.0.0.1", "LABELS": map[string]any{"app": "a"}})
	return &corev3.Node{Id: "sidecar~10.0.0.1~a-0.ns~ns.svc.cluster.local", Metadata: meta}
}

// attach makes a new stream the one responses go to, and returns its
// channel. The first stream takes the responses sent before it opened;
// those sent to a stream that has since closed are lost.
func (s *scriptedADS) attach() chan any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streams++; s.streams > 1 {
		s.out = make(chan any, 100)
	}
	return s.out
}

func (s *scriptedADS) StreamAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	out := s.attach()
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			s.reqs <- got{typeURL: r.GetTypeUrl(), version: r.GetVersionInfo(), nonce: r.GetResponseNonce(),
				names: r.GetResourceNames(), errorDetail: r.GetErrorDetail().GetMessage(), node: r.GetNode() != nil}
		}
	}()
	for {
		select {
		case m := <-out:
			if err := stream.Send(m.(*discoveryv3.DiscoveryResponse)); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return nil
		}
	}
}

func (s *scriptedADS) DeltaAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	out := s.attach()
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			s.reqs <- got{typeURL: r.GetTypeUrl(), nonce: r.GetResponseNonce(), sub: r.GetResourceNamesSubscribe(),
				unsub: r.GetResourceNamesUnsubscribe(), initial: r.GetInitialResourceVersions(),
				errorDetail: r.GetErrorDetail().GetMessage(), node: r.GetNode() != nil}
		}
	}()
	for {
		select {
		case m := <-out:
			if err := stream.Send(m.(*discoveryv3.DeltaDiscoveryResponse)); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return nil
		}
	}
}

// next is the next request the server receives.
func (s *scriptedADS) next() got {
	s.t.Helper()
	select {
	case r := <-s.reqs:
		return r
	case <-time.After(ecWaitLimit):
		s.t.Fatal("no request arrived")
		return got{}
	}
}

// expect is next, failing the test unless the request is of typeURL.
func (s *scriptedADS) expect(typeURL string) got {
	s.t.Helper()
	r := s.next()
	if r.typeURL != typeURL {
		s.t.Fatalf("got request %v, want one for %s", r, shortType(typeURL))
	}
	return r
}

// quiet fails the test if a request arrives within d: the client owes the
// server nothing more.
func (s *scriptedADS) quiet(d time.Duration) {
	s.t.Helper()
	select {
	case r := <-s.reqs:
		s.t.Fatalf("unexpected request %v", r)
	case <-time.After(d):
	}
}

// send sends resources of typeURL at version and returns the nonce; in
// delta, removed lists removed_resources (SotW removes by omission).
func (s *scriptedADS) send(typeURL, version string, resources []proto.Message, removed ...string) string {
	s.t.Helper()
	s.nonce++
	nonce := fmt.Sprintf("n%d", s.nonce)
	anys := make([]*anypb.Any, len(resources))
	for i, r := range resources {
		a, err := anypb.New(r)
		if err != nil {
			s.t.Fatal(err)
		}
		anys[i] = a
	}
	s.mu.Lock()
	out := s.out
	s.mu.Unlock()
	if s.mode == SotW {
		out <- &discoveryv3.DiscoveryResponse{VersionInfo: version, Resources: anys, TypeUrl: typeURL, Nonce: nonce}
		return nonce
	}
	resp := &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: version, TypeUrl: typeURL, Nonce: nonce, RemovedResources: removed}
	for i, a := range anys {
		resp.Resources = append(resp.Resources, &discoveryv3.Resource{Name: resourceName(resources[i]), Version: version, Resource: a})
	}
	out <- resp
	return nonce
}

// expectSubscription checks a request that changes the names of a
// non-wildcard type: in SotW the full set with the last accepted version
// and nonce of that type; in delta the increments.
func (s *scriptedADS) expectSubscription(typeURL, version, nonce string, names, sub, unsub []string) {
	s.t.Helper()
	r := s.expect(typeURL)
	if s.mode == SotW {
		if r.version != version || r.nonce != nonce || !slices.Equal(r.names, names) {
			s.t.Fatalf("%s request %v, want version %q nonce %q names %v", shortType(typeURL), r, version, nonce, names)
		}
		return
	}
	if r.nonce != "" || !slices.Equal(r.sub, sub) || !slices.Equal(r.unsub, unsub) {
		s.t.Fatalf("%s request %v, want subscribe %v unsubscribe %v and no nonce", shortType(typeURL), r, sub, unsub)
	}
}

// expectAck checks the ACK of the response with nonce, which accepted
// version; names is the SotW name set it carries (nil for a wildcard).
func (s *scriptedADS) expectAck(typeURL, version, nonce string, names []string) {
	s.t.Helper()
	r := s.expect(typeURL)
	if r.errorDetail != "" || r.nonce != nonce || (s.mode == SotW && (r.version != version || !slices.Equal(r.names, names))) {
		s.t.Fatalf("%s request %v, want an ACK of version %q nonce %q names %v", shortType(typeURL), r, version, nonce, names)
	}
	if s.mode == Delta && len(r.sub)+len(r.unsub) > 0 {
		s.t.Fatalf("ACK %v changes the subscription", r)
	}
}
