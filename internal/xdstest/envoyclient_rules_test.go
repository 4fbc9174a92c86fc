package xdstest

import (
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/anypb"
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

// An update identical to the active cluster while another version warms is
// not blocked: Envoy blocks only an update equal to the warming cluster, or
// to the active one when nothing warms, so the update replaces the warming
// cluster with a new one that must fetch its endpoints again
// (ClusterManagerImpl::addOrUpdateCluster, cluster_manager_impl.cc, and
// envoyproxy/envoy#14598).
func TestEnvoyClientClusterRevertedWhileWarmingWarmsAgain(t *testing.T) {
	ecBothModes(t, func(t *testing.T, mode Mode) {
		s, c := startScripted(t, mode)
		ecWarmUp(t, s, c)
		s.send(ecCDS, "c2", ecMsgs(ecCluster("a", clusterv3.Cluster_LEAST_REQUEST, 0)))
		s.drain(50 * time.Millisecond)
		// Back to the active version before the new one is warm.
		s.send(ecCDS, "c3", ecMsgs(ecCluster("a", clusterv3.Cluster_ROUND_ROBIN, 0)))
		s.drain(50 * time.Millisecond)
		if w := c.Warming(); len(w) != 1 || w[0].Name != "a" {
			t.Fatalf("warming %v, want cluster a warming again", w)
		}
		s.send(ecEDS, "e2", ecMsgs(ecAssignment("a", "10.1.0.2")))
		s.drain(50 * time.Millisecond)
		c.RequireWarm(ecWaitLimit, nil)
		if got := c.Cluster("a").GetLbPolicy(); got != clusterv3.Cluster_ROUND_ROBIN {
			t.Errorf("active cluster a has %v, want ROUND_ROBIN, the last version sent", got)
		}
		if got := c.Endpoints("a").GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress(); got != "10.1.0.2" {
			t.Errorf("cluster a serves %s, want the new assignment's 10.1.0.2", got)
		}
	})
}

// A listener update identical to the active listener while another version
// warms removes the warming listener and keeps the active one
// (ListenerManagerImpl::addOrUpdateListenerInternal, listener_manager_impl.cc:
// "The listener should be updated back to its original state and the
// warming listener should be removed").
func TestEnvoyClientListenerRevertedWhileWarmingDropsWarming(t *testing.T) {
	ecBothModes(t, func(t *testing.T, mode Mode) {
		s, c := startScripted(t, mode)
		ecWarmUp(t, s, c)
		s.send(ecLDS, "l2", ecMsgs(ecListener(t, "http", "v1", "r1")))
		s.drain(50 * time.Millisecond)
		s.send(ecRDS, "r-1", ecMsgs(ecRoute("r1", "a")))
		s.drain(50 * time.Millisecond)
		c.RequireWarm(ecWaitLimit, nil)

		s.send(ecLDS, "l3", ecMsgs(ecListener(t, "http", "v2", "r2")))
		s.drain(50 * time.Millisecond)
		if w := c.Warming(); len(w) != 1 || w[0].Name != "http" {
			t.Fatalf("warming %v, want listener http waiting for r2", w)
		}
		s.send(ecLDS, "l4", ecMsgs(ecListener(t, "http", "v1", "r1")))
		reqs := s.drain(50 * time.Millisecond)
		if w := c.Warming(); len(w) != 0 {
			t.Errorf("warming %v, want nothing: the warming listener is dropped", w)
		}
		// Dropping it gives up r2.
		unsubscribed := slices.ContainsFunc(reqs, func(r got) bool {
			return r.typeURL == ecRDS && (slices.Equal(r.names, []string{"r1"}) || slices.Equal(r.unsub, []string{"r2"}))
		})
		if !unsubscribed {
			t.Errorf("requests %v, want r2 unsubscribed", reqs)
		}
		s.send(ecRDS, "r-2", ecMsgs(ecRoute("r2", "a")))
		s.drain(50 * time.Millisecond)
		c.RequireWarm(ecWaitLimit, nil)
		if got := c.Listener("http"); got == nil || got.String() != ecListener(t, "http", "v1", "r1").String() {
			t.Errorf("listener http is %v, want v1", got)
		}
	})
}

// A SotW response of a type with no watch left is not ACKed: with no
// resources Envoy takes its version and sends nothing; with resources it
// re-requests at the previous version with the new nonce, and no
// error_detail (GrpcMuxImpl::onDiscoveryResponse, grpc_mux_impl.cc).
func TestEnvoyClientSotWResponseWithoutWatches(t *testing.T) {
	s, c := startScripted(t, SotW)
	edsVersion, _ := ecWarmUp(t, s, c)
	cn := s.send(ecCDS, "c2", nil) // cluster a is gone, and with it the last EDS watch
	s.expect(ecEDS)
	s.expectAck(ecCDS, "c2", cn, nil)

	s.send(ecEDS, "e2", nil)
	s.quiet(100 * time.Millisecond)

	n := s.send(ecEDS, "e3", ecMsgs(ecAssignment("a", "10.1.0.1")))
	r := s.expect(ecEDS)
	if r.version != "e2" || r.nonce != n || r.errorDetail != "" || len(r.names) != 0 {
		t.Errorf("got %v, want a request at version e2 (not e3, nor %s) with nonce %s and no error", r, edsVersion, n)
	}
	if len(c.Nacks()) != 0 {
		t.Errorf("Nacks() = %v, want none", c.Nacks())
	}
}

// In delta, a removal of a subscribed secret is ignored with an ACK, but
// the cluster or listener waiting for it completes warming
// (SdsApi::onConfigUpdate, sds_api.cc: "Even if we ignore this resource,
// the owning resource (LDS/CDS) should still complete warming").
func TestEnvoyClientDeltaRemovedSecretEndsWarming(t *testing.T) {
	cl := ecCluster("tls", clusterv3.Cluster_ROUND_ROBIN, 0)
	tlsCtx, _ := anypb.New(&tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: "cert", SdsConfig: ecADS(0)}},
	}})
	cl.TransportSocket = &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tlsCtx}}

	s, c := startScripted(t, Delta)
	s.expect(ecCDS)
	s.send(ecCDS, "c1", ecMsgs(cl))
	s.drain(50 * time.Millisecond)
	s.send(ecEDS, "e1", ecMsgs(ecAssignment("tls", "10.3.0.1")))
	s.drain(50 * time.Millisecond)
	if c.Cluster("tls") != nil {
		t.Fatal("cluster tls is active before its secret")
	}
	n := s.send(ecSDS, "s1", nil, "cert")
	var ack got
	for _, r := range s.drain(50 * time.Millisecond) {
		if r.typeURL == ecSDS {
			ack = r
		}
	}
	if ack.nonce != n || ack.errorDetail != "" {
		t.Errorf("SDS request %v, want an ACK of %s", ack, n)
	}
	if c.Cluster("tls") == nil {
		t.Errorf("cluster tls still warming after its secret was removed: %v", c.Warming())
	}
	want := "Cluster tls: Secret cert was never received"
	if d := c.Dangling(); !slices.Equal(d, []string{want}) {
		t.Errorf("Dangling = %v, want [%s]", d, want)
	}
}
