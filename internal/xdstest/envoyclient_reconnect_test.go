package xdstest

import (
	"maps"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/proto"
)

// expectFirst checks the first request of a type on a new stream: in SotW
// the whole set of names (nil for a wildcard) at the version last accepted,
// and no nonce, which does not outlive its stream; in delta the whole
// subscription (nothing for a wildcard) and the versions of what the client
// holds.
func (s *scriptedADS) expectFirst(typeURL, version string, names []string, initial map[string]string) got {
	s.t.Helper()
	r := s.expect(typeURL)
	ok := r.nonce == "" && r.errorDetail == ""
	if s.mode == SotW {
		ok = ok && r.version == version && slices.Equal(r.names, names)
	} else {
		ok = ok && slices.Equal(r.sub, names) && len(r.unsub) == 0 && maps.Equal(r.initial, initial)
	}
	if !ok {
		s.t.Fatalf("first %s request on the new stream is %v, want version %q names %v initial_resource_versions %v and no nonce",
			shortType(typeURL), r, version, names, initial)
	}
	return r
}

// A client that loses its stream keeps serving what it holds, starts the
// new stream with its whole subscription (and, in delta, the versions it
// holds), and ends up with the server's current state: here a cluster
// deleted while it was disconnected goes, and a cluster changed meanwhile
// warms again before it replaces the one serving.
func TestEnvoyClientReconnect(t *testing.T) {
	ecBothModes(t, func(t *testing.T, mode Mode) {
		s, c := startScripted(t, mode)
		edsVersion, edsNonce := ecWarmUp(t, s, c)
		a, b := ecCluster("a", clusterv3.Cluster_ROUND_ROBIN, 0), ecCluster("b", clusterv3.Cluster_ROUND_ROBIN, 0)
		var cn string
		if mode == SotW {
			cn = s.send(ecCDS, "c2", ecMsgs(a, b))
		} else {
			cn = s.send(ecCDS, "c2", ecMsgs(b))
		}
		s.expectSubscription(ecEDS, edsVersion, edsNonce, []string{"a", "b"}, []string{"b"}, nil)
		s.expectAck(ecCDS, "c2", cn, nil)
		en := s.send(ecEDS, "e2", ecMsgs(ecAssignment("b", "10.2.0.1")))
		s.expectAck(ecEDS, "e2", en, []string{"a", "b"})
		ln := s.send(ecLDS, "l2", ecMsgs(ecListener(t, "http", "v1", "r1")))
		s.expectSubscription(ecRDS, "", "", []string{"r1"}, []string{"r1"}, nil)
		s.expectAck(ecLDS, "l2", ln, nil)
		rn := s.send(ecRDS, "r-1", ecMsgs(ecRoute("r1", "a")))
		s.expectAck(ecRDS, "r-1", rn, []string{"r1"})
		c.RequireWarm(ecWaitLimit, nil)
		before := c.Active()

		c.Disconnect()
		s.quiet(50 * time.Millisecond)
		if err := c.Err(); err != nil {
			t.Fatalf("Err() = %v after Disconnect, want nil", err)
		}
		held := func(when string) {
			t.Helper()
			if got := c.Active(); !sameSnapshot(got, before) || len(c.Warming()) > 0 {
				t.Fatalf("%s the client serves %d clusters, %d listeners, %d routes and warms %v; want all it had and nothing warming",
					when, len(got.Clusters), len(got.Listeners), len(got.Routes), c.Warming())
			}
		}
		held("while disconnected")

		// Meanwhile cluster b is deleted and cluster a changes.
		c.Reconnect()
		if r := s.expectFirst(ecCDS, "c2", nil, map[string]string{"a": "c1", "b": "c2"}); !r.node {
			t.Errorf("the new stream's first request %v carries no node", r)
		}
		s.expectFirst(ecEDS, "e2", []string{"a", "b"}, map[string]string{"a": "e1", "b": "e2"})
		s.expectFirst(ecLDS, "l2", nil, map[string]string{"http": "l2"})
		s.expectFirst(ecRDS, "r-1", []string{"r1"}, map[string]string{"r1": "r-1"})
		s.quiet(50 * time.Millisecond)
		held("before the new stream's first response,")

		a2 := ecCluster("a", clusterv3.Cluster_LEAST_REQUEST, 0)
		if mode == SotW {
			cn = s.send(ecCDS, "c3", ecMsgs(a2))
		} else {
			cn = s.send(ecCDS, "c3", ecMsgs(a2), "b")
		}
		// b's watch goes; in SotW the new a's watch re-requests a too. No
		// EDS response has come on this stream: no nonce yet.
		s.expectSubscription(ecEDS, "e2", "", []string{"a"}, nil, []string{"b"})
		s.expectAck(ecCDS, "c3", cn, nil)
		s.quiet(50 * time.Millisecond)
		if got := c.Active(); got.Clusters["b"] != nil || got.Clusters["a"].GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN {
			t.Errorf("after CDS on the new stream the clusters are %v, want b gone and the old a serving while the new one warms", got.Clusters)
		}
		en = s.send(ecEDS, "e3", ecMsgs(ecAssignment("a", "10.1.0.9")))
		s.expectAck(ecEDS, "e3", en, []string{"a"})
		// Unchanged listeners and routes: SotW sends them all again, delta
		// has nothing to send but the answer to the LDS request.
		if mode == SotW {
			ln = s.send(ecLDS, "l2", ecMsgs(ecListener(t, "http", "v1", "r1")))
			s.expectAck(ecLDS, "l2", ln, nil)
			rn = s.send(ecRDS, "r-1", ecMsgs(ecRoute("r1", "a")))
			s.expectAck(ecRDS, "r-1", rn, []string{"r1"})
		} else {
			ln = s.send(ecLDS, "l2", nil)
			s.expectAck(ecLDS, "l2", ln, nil)
		}
		c.RequireWarm(ecWaitLimit, nil)
		got := c.Active()
		if len(got.Clusters) != 1 || got.Clusters["a"].GetLbPolicy() != clusterv3.Cluster_LEAST_REQUEST ||
			got.Endpoints["a"].GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress() != "10.1.0.9" {
			t.Errorf("after reconnecting the client serves clusters %v with endpoints %v, want the new a only", got.Clusters, got.Endpoints)
		}
		if got.Listeners["http"] == nil || got.Routes["r1"] == nil {
			t.Errorf("after reconnecting the client lost listener http or route r1: %v, %v", got.Listeners, got.Routes)
		}

		// What a later stream reports forgets what was removed or
		// unsubscribed from.
		c.Reconnect()
		s.expectFirst(ecCDS, "c3", nil, map[string]string{"a": "c3"})
		s.expectFirst(ecEDS, "e3", []string{"a"}, map[string]string{"a": "e3"})
		s.expectFirst(ecLDS, "l2", nil, map[string]string{"http": "l2"})
		s.expectFirst(ecRDS, "r-1", []string{"r1"}, map[string]string{"r1": "r-1"})
	})
}

// sameSnapshot reports whether two snapshots hold the same resources.
func sameSnapshot(a, b Snapshot) bool {
	return sameByName(a.Clusters, b.Clusters) && sameByName(a.Endpoints, b.Endpoints) &&
		sameByName(a.Listeners, b.Listeners) && sameByName(a.Routes, b.Routes) && sameByName(a.Secrets, b.Secrets)
}

func sameByName[M proto.Message](a, b map[string]M) bool {
	return maps.EqualFunc(a, b, func(x, y M) bool { return proto.Equal(x, y) })
}
