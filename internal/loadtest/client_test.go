package loadtest

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// captureStream records what a client sends.
type captureStream struct {
	grpc.ClientStream
	sent [][]byte
}

func (c *captureStream) SendMsg(m any) error {
	b, err := rawCodec{}.Marshal(m)
	if err != nil {
		return err
	}
	c.sent = append(c.sent, b.Materialize())
	return nil
}

// TestSotWRequestEncoding checks the hand-encoded DiscoveryRequest against
// what proto decodes from it: the node on the first request only, the
// names sorted, and a changed set of names re-encoded.
func TestSotWRequestEncoding(t *testing.T) {
	node := &corev3.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local"}
	cs := &captureStream{}
	snd := &sender{s: cs, node: node}
	sub := &subscription{url: EndpointType, names: map[string]*subName{}}
	c := &Client{types: map[string]*subscription{EndpointType: sub}}
	c.ref(EndpointType, "b", 1)
	c.ref(EndpointType, "a", 1)
	first := pending{url: EndpointType, version: "v1", nonce: "n1", namesWire: sub.namesWire()}
	c.ref(EndpointType, "a", -1)
	c.ref(EndpointType, "c", 1)
	second := pending{url: EndpointType, namesWire: sub.namesWire()}
	for _, p := range []pending{first, second} {
		if err := snd.sotw(p); err != nil {
			t.Fatal(err)
		}
	}
	want := []*discoveryv3.DiscoveryRequest{
		{VersionInfo: "v1", Node: node, ResourceNames: []string{"a", "b"}, TypeUrl: EndpointType, ResponseNonce: "n1"},
		{ResourceNames: []string{"b", "c"}, TypeUrl: EndpointType},
	}
	for i, b := range cs.sent {
		var got discoveryv3.DiscoveryRequest
		if err := proto.Unmarshal(b, &got); err != nil {
			t.Fatalf("request %d does not parse: %v", i, err)
		}
		if !proto.Equal(&got, want[i]) {
			t.Errorf("request %d = %v, want %v", i, &got, want[i])
		}
	}
}

func TestClientNode(t *testing.T) {
	cases := []struct {
		name    string
		o       ClientOptions
		wantID  string
		wantErr bool
	}{
		{"sidecar", ClientOptions{Kind: KindSidecar, Index: 3, Namespace: "scale-0"}, "sidecar~10.200.0.4~load-3.scale-0~scale-0.svc.cluster.local", false},
		{"router", ClientOptions{Kind: KindRouter, Index: 251}, "router~10.200.1.2~gateway-251.istio-system~istio-system.svc.cluster.local", false},
		{"grpc without targets", ClientOptions{Kind: KindGRPC, Namespace: "ns"}, "", true},
		{"sidecar without namespace", ClientOptions{Kind: KindSidecar}, "", true},
		{"unknown kind", ClientOptions{Kind: "waypoint", Namespace: "ns"}, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, err := clientNode(tc.o)
			if (err != nil) != tc.wantErr {
				t.Fatalf("clientNode: error %v, want error %v", err, tc.wantErr)
			}
			if err == nil && n.GetId() != tc.wantID {
				t.Errorf("node id %q, want %q", n.GetId(), tc.wantID)
			}
		})
	}
	n, err := clientNode(ClientOptions{Kind: KindGRPC, Namespace: "ns", Targets: []string{"a:80"}})
	if err != nil {
		t.Fatal(err)
	}
	if g := n.GetMetadata().GetFields()["GENERATOR"].GetStringValue(); g != "grpc" {
		t.Errorf("proxyless node GENERATOR %q, want grpc", g)
	}
}

// TestReceivedNamesCount checks the count of received names that full()
// compares with the subscription: names outside the subscription and
// repeats do not count, and dropping a received name uncounts it.
func TestReceivedNamesCount(t *testing.T) {
	sub := &subscription{url: EndpointType, names: map[string]*subName{}}
	c := &Client{proxyless: true, types: map[string]*subscription{EndpointType: sub},
		clusters: map[string]*clusterEntry{}, byEDS: map[string][]string{}}
	receive := func(names ...string) {
		r := &response{typeURL: EndpointType}
		for _, n := range names {
			r.resources = append(r.resources, wireResource{name: []byte(n)})
		}
		c.handle(r)
	}
	steps := []struct {
		do                 func()
		wantGot, wantNames int
	}{
		{func() { c.ref(EndpointType, "a", 1); c.ref(EndpointType, "b", 1); c.ref(EndpointType, "b", 1) }, 0, 2},
		{func() { receive("a", "x") }, 1, 2},
		{func() { receive("a") }, 1, 2},
		{func() { c.ref(EndpointType, "b", -1) }, 1, 2},
		{func() { c.ref(EndpointType, "a", -1) }, 0, 1},
		{func() { receive("b") }, 1, 1},
		{func() { c.ref(EndpointType, "a", 1) }, 1, 2},
	}
	for i, s := range steps {
		s.do()
		if sub.nGot != s.wantGot || len(sub.names) != s.wantNames {
			t.Errorf("step %d: %d of %d names received, want %d of %d", i, sub.nGot, len(sub.names), s.wantGot, s.wantNames)
		}
		if want := s.wantGot == s.wantNames; c.full() != want {
			t.Errorf("step %d: full() = %v, want %v", i, c.full(), want)
		}
	}
}
