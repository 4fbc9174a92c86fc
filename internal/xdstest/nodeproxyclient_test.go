package xdstest

import (
	"maps"
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/proto"
)

// TestNodeProxyClient: the client subscribes to everything of its type,
// keeps what responses add or replace until one removes it, ACKs each
// response, NACKs one that repeats a name (keeping nothing of it), and
// starts a new stream with the versions of what it holds.
func TestNodeProxyClient(t *testing.T) {
	s, conn := serveScripted(t, Delta)
	c := NewNodeProxyClient(t, conn, testNode(), ecCDS)
	if r := s.expect(ecCDS); len(r.sub) != 0 || len(r.initial) != 0 || !r.node {
		t.Fatalf("first request %v, want the wildcard with the node and nothing held", r)
	}
	held := func() []string { return slices.Sorted(maps.Keys(c.Active().Workload[ecCDS])) }
	a, b := ecCluster("a", clusterv3.Cluster_ROUND_ROBIN, 0), ecCluster("b", clusterv3.Cluster_ROUND_ROBIN, 0)
	n1 := s.send(ecCDS, "v1", ecMsgs(a, b))
	s.expectAck(ecCDS, "", n1, nil)
	if got := held(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("holds %v, want a and b", got)
	}

	a2 := ecCluster("a", clusterv3.Cluster_LEAST_REQUEST, 0)
	n2 := s.send(ecCDS, "v2", ecMsgs(a2), "b")
	s.expectAck(ecCDS, "", n2, nil)
	if got := c.Active().Workload[ecCDS]; len(got) != 1 || !proto.Equal(got["a"], a2) {
		t.Fatalf("holds %v, want a's second version alone", slices.Sorted(maps.Keys(got)))
	}

	n3 := s.send(ecCDS, "v3", ecMsgs(a, a))
	if r := s.expect(ecCDS); r.nonce != n3 || r.errorDetail == "" {
		t.Fatalf("request %v, want a NACK of %s", r, n3)
	}
	if got := c.Active().Workload[ecCDS]; !proto.Equal(got["a"], a2) || len(c.Nacks()) != 1 {
		t.Fatalf("after a rejected response: holds %v, %d NACKs; want a's second version and one NACK", got, len(c.Nacks()))
	}

	c.Reconnect()
	if r := s.expect(ecCDS); r.nonce != "" || !maps.Equal(r.initial, map[string]string{"a": "v2"}) {
		t.Fatalf("first request of the new stream %v, want initial_resource_versions {a: v2} and no nonce", r)
	}
	if c.Answered() || len(held()) != 1 {
		t.Fatalf("after a reconnect: answered %v, holding %v; want unanswered, still holding a", c.Answered(), held())
	}
}
