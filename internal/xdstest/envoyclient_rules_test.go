package xdstest

import (
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
)

// drain consumes requests until none arrives for d, and returns them.
func (s *scriptedADS) drain(d time.Duration) []got {
	var out []got
	for {
		select {
		case r := <-s.reqs:
			out = append(out, r)
		case <-time.After(d):
			return out
		}
	}
}

// Envoy's DeltaSubscriptionState rejects a response that names a resource
// twice among removed_resources, or both in resources and in
// removed_resources, before applying any of it (delta_subscription_state.cc).
func TestEnvoyClientDeltaNacksNameBothAddedAndRemoved(t *testing.T) {
	for _, tc := range []struct {
		name    string
		added   []string
		removed []string
		want    string
	}{
		{"added and removed", []string{"b"}, []string{"b"}, "duplicate name b found in the union of added+removed resources"},
		{"removed twice", nil, []string{"a", "a"}, "duplicate name a found in the union of added+removed resources"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c := startScripted(t, Delta)
			ecWarmUp(t, s, c)
			var added []*clusterv3.Cluster
			for _, n := range tc.added {
				added = append(added, ecCluster(n, clusterv3.Cluster_ROUND_ROBIN, 0))
			}
			n := s.send(ecCDS, "c2", ecMsgs(added...), tc.removed...)
			r := s.expect(ecCDS)
			if r.nonce != n || !strings.Contains(r.errorDetail, tc.want) {
				t.Fatalf("got %v, want a NACK of nonce %s saying %q", r, n, tc.want)
			}
			if active := c.Active(); len(active.Clusters) != 1 || active.Clusters["a"] == nil {
				t.Errorf("after the NACK the clusters are %v, want a only", active.Clusters)
			}
		})
	}
}
