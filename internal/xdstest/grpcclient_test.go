package xdstest

import (
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// startGRPCScripted connects a GRPCClient for listener "t" to a scripted
// server, and checks its first request.
func startGRPCScripted(t *testing.T) (*scriptedADS, *GRPCClient) {
	t.Helper()
	s, conn := serveScripted(t, SotW)
	c := NewGRPCClient(t, conn, testNode(), "t")
	s.expectSubscription(ecLDS, "", "", []string{"t"}, nil, nil)
	return s, c
}

// grpcFollow serves listener t → route r → cluster c → its load
// assignment, one type at a time, checking that each response is ACKed
// and followed by the subscription it leads to; it returns the nonces.
func grpcFollow(t *testing.T, s *scriptedADS, cluster string) (lds, rds, cds, eds string) {
	t.Helper()
	lds = s.send(ecLDS, "l1", ecMsgs(ecListener(t, "t", "t", "r")))
	s.expectAck(ecLDS, "l1", lds, []string{"t"})
	s.expectSubscription(ecRDS, "", "", []string{"r"}, nil, nil)
	rds = s.send(ecRDS, "r1", ecMsgs(ecRoute("r", cluster)))
	s.expectAck(ecRDS, "r1", rds, []string{"r"})
	s.expectSubscription(ecCDS, "", "", []string{cluster}, nil, nil)
	cds = s.send(ecCDS, "c1", ecMsgs(ecCluster(cluster, clusterv3.Cluster_ROUND_ROBIN, 0)))
	s.expectAck(ecCDS, "c1", cds, []string{cluster})
	s.expectSubscription(ecEDS, "", "", []string{cluster}, nil, nil)
	eds = s.send(ecEDS, "e1", ecMsgs(ecAssignment(cluster, "10.0.0.1")))
	s.expectAck(ecEDS, "e1", eds, []string{cluster})
	return lds, rds, cds, eds
}

// waitGRPC waits until cond holds on what c uses.
func waitGRPC(t *testing.T, c *GRPCClient, what string, cond func(Snapshot) bool) {
	t.Helper()
	deadline := time.Now().Add(ecWaitLimit)
	for !cond(c.Active()) {
		if time.Now().After(deadline) {
			t.Fatalf("the client never came to hold %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGRPCClientFollowsNames: the client subscribes by name only, from the
// listener down to the load assignment, uses what it accepts at once, and
// when a route moves to another cluster, unsubscribes from the old one and
// its load assignment and forgets both.
func TestGRPCClientFollowsNames(t *testing.T) {
	s, c := startGRPCScripted(t)
	_, _, cds, eds := grpcFollow(t, s, "a")
	waitGRPC(t, c, "the whole chain", func(snap Snapshot) bool {
		return snap.Listeners["t"] != nil && snap.Routes["r"] != nil && snap.Clusters["a"] != nil && snap.Endpoints["a"] != nil
	})
	if got := c.Awaiting(); len(got) != 0 {
		t.Fatalf("awaiting %v after every type was answered", got)
	}

	rds2 := s.send(ecRDS, "r2", ecMsgs(ecRoute("r", "b")))
	s.expectAck(ecRDS, "r2", rds2, []string{"r"})
	s.expectSubscription(ecCDS, "c1", cds, []string{"b"}, nil, nil)
	s.expectSubscription(ecEDS, "e1", eds, []string{}, nil, nil)
	snap := c.Active()
	if snap.Clusters["a"] != nil || snap.Endpoints["a"] != nil {
		t.Fatal("the client still holds cluster a and its endpoints after the route left them")
	}
	if got := c.Awaiting(); !slices.Equal(got, []string{"CDS b"}) {
		t.Fatalf("awaiting %v, want CDS b: it asked for cluster b", got)
	}
	s.quiet(50 * time.Millisecond)
}

// TestGRPCClientFullStateTypes: a listener or cluster that an LDS or CDS
// response leaves out is deleted, and what depended on it unsubscribed; a
// route configuration left out of an RDS response is kept.
func TestGRPCClientFullStateTypes(t *testing.T) {
	s, c := startGRPCScripted(t)
	_, _, _, eds := grpcFollow(t, s, "a")

	rds2 := s.send(ecRDS, "r2", nil)
	s.expectAck(ecRDS, "r2", rds2, []string{"r"})
	s.quiet(50 * time.Millisecond)
	if c.Active().Routes["r"] == nil {
		t.Fatal("a route configuration left out of an RDS response was dropped")
	}

	cds2 := s.send(ecCDS, "c2", nil)
	s.expectAck(ecCDS, "c2", cds2, []string{"a"})
	s.expectSubscription(ecEDS, "e1", eds, []string{}, nil, nil)
	if snap := c.Active(); snap.Clusters["a"] != nil || snap.Endpoints["a"] != nil {
		t.Fatal("cluster a, left out of a CDS response, is still used")
	}

	lds2 := s.send(ecLDS, "l2", nil)
	s.expectAck(ecLDS, "l2", lds2, []string{"t"})
	s.expectSubscription(ecRDS, "r2", rds2, []string{}, nil, nil)
	if snap := c.Active(); snap.Listeners["t"] != nil || snap.Routes["r"] != nil {
		t.Fatal("listener t, left out of an LDS response, is still used, or its routes")
	}
}

// TestGRPCClientNacks: a response with an invalid resource is NACKed with
// the last accepted version, and the client keeps what it held of that
// name.
func TestGRPCClientNacks(t *testing.T) {
	s, c := startGRPCScripted(t)
	grpcFollow(t, s, "a")
	bad := ecCluster("a", clusterv3.Cluster_ROUND_ROBIN, 0)
	bad.ConnectTimeout = durationpb.New(-time.Second)
	nonce := s.send(ecCDS, "c2", ecMsgs(bad))
	r := s.expect(ecCDS)
	if r.version != "c1" || r.nonce != nonce || r.errorDetail == "" || !slices.Equal(r.names, []string{"a"}) {
		t.Fatalf("CDS request %v, want a NACK of nonce %s at version c1", r, nonce)
	}
	if got := c.Active().Clusters["a"].GetConnectTimeout().AsDuration(); got != time.Second {
		t.Fatalf("the client uses a cluster of connect timeout %v, want the accepted one's 1s", got)
	}
	if n := c.Nacks(); len(n) != 1 || !strings.Contains(n[0].Error, "ConnectTimeout") {
		t.Fatalf("NACKs %v, want one naming ConnectTimeout", n)
	}
}

// TestGRPCClientTakesValidResourcesOfANackedResponse: as grpc-go does
// (gRFC A46), the client uses the valid resources of a response it NACKs,
// and follows them.
func TestGRPCClientTakesValidResourcesOfANackedResponse(t *testing.T) {
	s, c := startGRPCScripted(t)
	_, _, cds, eds := grpcFollow(t, s, "a")
	bad := ecRoute("x", "a")
	bad.VirtualHosts[0].Domains = nil
	nonce := s.send(ecRDS, "r2", ecMsgs(ecRoute("r", "b"), bad))
	r := s.expect(ecRDS)
	if r.version != "r1" || r.nonce != nonce || !strings.Contains(r.errorDetail, "x:") || !slices.Equal(r.names, []string{"r"}) {
		t.Fatalf("RDS request %v, want a NACK of nonce %s at version r1 naming route configuration x", r, nonce)
	}
	s.expectSubscription(ecCDS, "c1", cds, []string{"b"}, nil, nil)
	s.expectSubscription(ecEDS, "e1", eds, []string{}, nil, nil)
	if got := c.Active().Routes["r"]; got == nil || got.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster() != "b" {
		t.Fatalf("the client uses route configuration %v, want the one to cluster b that the NACKed response carried", got)
	}
}

// TestGRPCClientReconnect: a new stream asks again for every type it
// follows, with the whole set of names, the last accepted version and no
// nonce, and the client keeps what it holds meanwhile.
func TestGRPCClientReconnect(t *testing.T) {
	s, c := startGRPCScripted(t)
	grpcFollow(t, s, "a")
	c.Reconnect()
	for _, want := range []struct {
		typeURL, version, name string
	}{{ecLDS, "l1", "t"}, {ecRDS, "r1", "r"}, {ecCDS, "c1", "a"}, {ecEDS, "e1", "a"}} {
		r := s.expect(want.typeURL)
		if r.version != want.version || r.nonce != "" || !slices.Equal(r.names, []string{want.name}) || r.node != (want.typeURL == ecLDS) {
			t.Fatalf("first %s request of the new stream %v, want version %q, no nonce, names [%s]", shortType(want.typeURL), r, want.version, want.name)
		}
	}
	if snap := c.Active(); snap.Clusters["a"] == nil || snap.Endpoints["a"] == nil {
		t.Fatal("the client dropped what it held when its stream broke")
	}
	if got := c.Awaiting(); len(got) != 0 {
		t.Fatalf("awaiting %v, want nothing: it holds every name it asked for again", got)
	}
}
