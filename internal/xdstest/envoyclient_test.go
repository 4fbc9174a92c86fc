package xdstest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

var (
	ecCDS = resourcev3.ClusterType
	ecEDS = resourcev3.EndpointType
	ecLDS = resourcev3.ListenerType
	ecRDS = resourcev3.RouteType
	ecSDS = resourcev3.SecretType
)

func ecBothModes(t *testing.T, run func(t *testing.T, mode Mode)) {
	for _, mode := range []Mode{SotW, Delta} {
		t.Run(mode.String(), func(t *testing.T) { run(t, mode) })
	}
}

func ecADS(timeout time.Duration) *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		InitialFetchTimeout:   durationpb.New(timeout),
	}
}

// ecCluster is an EDS cluster fetching its endpoints over ADS with the
// given initial_fetch_timeout (0: wait forever).
func ecCluster(name string, lb clusterv3.Cluster_LbPolicy, timeout time.Duration) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ConnectTimeout:       durationpb.New(time.Second),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		LbPolicy:             lb,
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ecADS(timeout)},
	}
}

func ecAssignment(cluster string, ips ...string) *endpointv3.ClusterLoadAssignment {
	var lbs []*endpointv3.LbEndpoint
	for _, ip := range ips {
		lbs = append(lbs, &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 80},
			}}},
		}}})
	}
	return &endpointv3.ClusterLoadAssignment{ClusterName: cluster, Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: lbs}}}
}

// ecListener is a listener whose HCM fetches route config route over ADS.
func ecListener(t *testing.T, name, statPrefix, route string) *listenerv3.Listener {
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		StatPrefix: statPrefix,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource: ecADS(0), RouteConfigName: route,
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &listenerv3.Listener{Name: name, FilterChains: []*listenerv3.FilterChain{{
		Filters: []*listenerv3.Filter{{Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm}}},
	}}}
}

func ecRoute(name, cluster string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{{
		Name: "all", Domains: []string{"*"},
		Routes: []*routev3.Route{{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}},
		}},
	}}}
}

func ecMsgs[M proto.Message](ms ...M) []proto.Message {
	out := make([]proto.Message, len(ms))
	for i, m := range ms {
		out[i] = m
	}
	return out
}

// ecWarmUp serves cluster a (ROUND_ROBIN, one endpoint) and no listeners,
// checking the requests of Envoy's initialization on the way, and returns
// the nonce and version of the EDS response.
func ecWarmUp(t *testing.T, s *scriptedADS, c *EnvoyClient) (edsVersion, edsNonce string) {
	t.Helper()
	first := s.expect(ecCDS)
	if !first.node || first.version != "" || first.nonce != "" || len(first.names)+len(first.sub) != 0 {
		t.Fatalf("first request %v, want a CDS wildcard with the node", first)
	}
	n := s.send(ecCDS, "c1", ecMsgs(ecCluster("a", clusterv3.Cluster_ROUND_ROBIN, 0)))
	// The EDS request comes before the CDS ACK, and carries no node again.
	s.expectSubscription(ecEDS, "", "", []string{"a"}, []string{"a"}, nil)
	s.expectAck(ecCDS, "c1", n, nil)
	s.quiet(50 * time.Millisecond) // LDS waits for the clusters to warm
	if c.Cluster("a") != nil {
		t.Fatal("cluster a is active before its load assignment arrived")
	}
	en := s.send(ecEDS, "e1", ecMsgs(ecAssignment("a", "10.1.0.1")))
	if r := s.expect(ecLDS); r.version != "" || r.nonce != "" || len(r.names)+len(r.sub) != 0 {
		t.Fatalf("LDS request %v, want a wildcard", r)
	}
	s.expectAck(ecEDS, "e1", en, []string{"a"})
	ln := s.send(ecLDS, "l1", nil)
	s.expectAck(ecLDS, "l1", ln, nil)
	if err := c.WaitWarm(ecWaitLimit); err != nil {
		t.Fatal(err)
	}
	return "e1", en
}

func TestEnvoyClientChangedClusterWarmsUntilEDS(t *testing.T) {
	ecBothModes(t, func(t *testing.T, mode Mode) {
		s, c := startScripted(t, mode)
		edsVersion, edsNonce := ecWarmUp(t, s, c)

		cn := s.send(ecCDS, "c2", ecMsgs(ecCluster("a", clusterv3.Cluster_LEAST_REQUEST, 0)))
		if mode == SotW {
			// The new cluster's EDS watch re-requests the same names at the
			// last EDS version and nonce: to the server it looks like an ACK.
			s.expectSubscription(ecEDS, edsVersion, edsNonce, []string{"a"}, nil, nil)
		}
		// In delta the name is already subscribed, so nothing is asked.
		s.expectAck(ecCDS, "c2", cn, nil)
		s.quiet(50 * time.Millisecond)

		if got := c.Cluster("a").GetLbPolicy(); got != clusterv3.Cluster_ROUND_ROBIN {
			t.Errorf("while the new version warms, the active cluster has %v, want the old ROUND_ROBIN", got)
		}
		warming := c.Warming()
		if len(warming) != 1 || warming[0].Name != "a" || !slices.Equal(warming[0].WaitingFor, []string{"ClusterLoadAssignment a"}) {
			t.Errorf("warming %v, want cluster a waiting for its load assignment", warming)
		}
		if err := c.WaitWarm(100 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "Cluster a warming") {
			t.Errorf("WaitWarm = %v, want it to report cluster a warming", err)
		}

		en := s.send(ecEDS, "e2", ecMsgs(ecAssignment("a", "10.1.0.1", "10.1.0.2")))
		// Removing the old version's watch is merged into the EDS ACK.
		s.expectAck(ecEDS, "e2", en, []string{"a"})
		s.quiet(50 * time.Millisecond)
		c.RequireWarm(ecWaitLimit, nil)
		if got := c.Cluster("a").GetLbPolicy(); got != clusterv3.Cluster_LEAST_REQUEST {
			t.Errorf("active cluster has %v, want the new LEAST_REQUEST", got)
		}
		if n := len(c.Endpoints("a").GetEndpoints()[0].GetLbEndpoints()); n != 2 {
			t.Errorf("cluster a has %d endpoints, want the new assignment's 2", n)
		}
	})
}

func TestEnvoyClientNacksWholeResponse(t *testing.T) {
	invalid := ecCluster("b", clusterv3.Cluster_LbPolicy(99), 0)
	for _, tc := range []struct {
		name      string
		resources []proto.Message
		want      string
	}{
		{"an invalid resource", ecMsgs(ecCluster("a", clusterv3.Cluster_RANDOM, 0), invalid), "LbPolicy"},
		{"a duplicate name", ecMsgs(ecCluster("a", clusterv3.Cluster_RANDOM, 0), ecCluster("a", clusterv3.Cluster_MAGLEV, 0)), `duplicate resource "a"`},
		{"a resource of another type", ecMsgs[proto.Message](ecCluster("a", clusterv3.Cluster_RANDOM, 0), ecAssignment("a")), "in a " + ecCDS + " response"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ecBothModes(t, func(t *testing.T, mode Mode) {
				s, c := startScripted(t, mode)
				ecWarmUp(t, s, c)
				n := s.send(ecCDS, "c2", tc.resources)
				r := s.expect(ecCDS) // no EDS request: nothing was applied
				if r.nonce != n || !strings.Contains(r.errorDetail, tc.want) || (mode == SotW && r.version != "c1") {
					t.Fatalf("got %v, want a NACK of nonce %s at the last accepted version c1 mentioning %q", r, n, tc.want)
				}
				if nacks := c.Nacks(); len(nacks) != 1 || nacks[0].Nonce != n || nacks[0].Version != "c2" {
					t.Errorf("Nacks() = %v, want the one of c2", nacks)
				}
				active := c.Active()
				if len(active.Clusters) != 1 || active.Clusters["a"].GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN {
					t.Errorf("after a NACK the clusters are %v, want the previous a only", active.Clusters)
				}
				if len(c.Warming()) != 0 {
					t.Errorf("a rejected response started warming: %v", c.Warming())
				}
			})
		})
	}
}

func TestEnvoyClientRemovedClusterUnsubscribes(t *testing.T) {
	ecBothModes(t, func(t *testing.T, mode Mode) {
		s, c := startScripted(t, mode)
		edsVersion, edsNonce := ecWarmUp(t, s, c)
		a, b := ecCluster("a", clusterv3.Cluster_ROUND_ROBIN, 0), ecCluster("b", clusterv3.Cluster_ROUND_ROBIN, 0)
		var cn string
		if mode == SotW {
			cn = s.send(ecCDS, "c2", ecMsgs(a, b))
		} else {
			cn = s.send(ecCDS, "c2", ecMsgs(b)) // a is unchanged: delta sends only b
		}
		s.expectSubscription(ecEDS, edsVersion, edsNonce, []string{"a", "b"}, []string{"b"}, nil)
		s.expectAck(ecCDS, "c2", cn, nil)
		en := s.send(ecEDS, "e2", ecMsgs(ecAssignment("b", "10.2.0.1")))
		s.expectAck(ecEDS, "e2", en, []string{"a", "b"})
		c.RequireWarm(ecWaitLimit, nil)

		if mode == SotW {
			cn = s.send(ecCDS, "c3", ecMsgs(b))
		} else {
			cn = s.send(ecCDS, "c3", nil, "a")
		}
		s.expectSubscription(ecEDS, "e2", en, []string{"b"}, nil, []string{"a"})
		s.expectAck(ecCDS, "c3", cn, nil)
		if active := c.Active(); active.Clusters["a"] != nil || active.Endpoints["a"] != nil || active.Clusters["b"] == nil {
			t.Errorf("after removing a the client serves clusters %v and endpoints %v", active.Clusters, active.Endpoints)
		}
		c.RequireWarm(ecWaitLimit, nil)
	})
}

func TestEnvoyClientListenerWarmsUntilRDS(t *testing.T) {
	ecBothModes(t, func(t *testing.T, mode Mode) {
		s, c := startScripted(t, mode)
		ecWarmUp(t, s, c)

		ln := s.send(ecLDS, "l2", ecMsgs(ecListener(t, "http", "v1", "r1")))
		s.expectSubscription(ecRDS, "", "", []string{"r1"}, []string{"r1"}, nil)
		s.expectAck(ecLDS, "l2", ln, nil)
		if c.Listener("http") != nil {
			t.Fatal("the listener is active before its routes arrived")
		}
		if w := c.Warming(); len(w) != 1 || w[0].Type != "Listener" || !slices.Equal(w[0].WaitingFor, []string{"RouteConfiguration r1"}) {
			t.Errorf("warming %v, want listener http waiting for r1", w)
		}
		rn := s.send(ecRDS, "r-1", ecMsgs(ecRoute("r1", "a")))
		s.expectAck(ecRDS, "r-1", rn, []string{"r1"})
		c.RequireWarm(ecWaitLimit, nil)

		// A changed listener that names a route config already received
		// shares its subscription: no request, and it is warm at once.
		ln = s.send(ecLDS, "l3", ecMsgs(ecListener(t, "http", "v2", "r1")))
		s.expectAck(ecLDS, "l3", ln, nil)
		c.RequireWarm(ecWaitLimit, nil)
		if got := c.Listener("http"); got == nil || !proto.Equal(got, ecListener(t, "http", "v2", "r1")) {
			t.Errorf("listener http is %v, want the changed version", got)
		}

		// A listener naming a new route config warms until it arrives.
		ln = s.send(ecLDS, "l4", ecMsgs(ecListener(t, "http", "v2", "r1"), ecListener(t, "admin", "adm", "r2")))
		s.expectSubscription(ecRDS, "r-1", rn, []string{"r1", "r2"}, []string{"r2"}, nil)
		s.expectAck(ecLDS, "l4", ln, nil)
		if c.Listener("admin") != nil {
			t.Error("listener admin is active before r2 arrived")
		}
		rn = s.send(ecRDS, "r-2", ecMsgs(ecRoute("r2", "a")))
		s.expectAck(ecRDS, "r-2", rn, []string{"r1", "r2"})
		c.RequireWarm(ecWaitLimit, nil)
	})
}

func TestEnvoyClientReportsDanglingReferences(t *testing.T) {
	secretRef := ecCluster("tls", clusterv3.Cluster_ROUND_ROBIN, 0)
	tlsCtx, _ := anypb.New(&tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: "cert", SdsConfig: ecADS(20 * time.Millisecond)}},
	}})
	secretRef.TransportSocket = &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tlsCtx}}

	ecBothModes(t, func(t *testing.T, mode Mode) {
		t.Run("a route to a missing cluster", func(t *testing.T) {
			s, c := startScripted(t, mode)
			ecWarmUp(t, s, c)
			ln := s.send(ecLDS, "l2", ecMsgs(ecListener(t, "http", "v1", "r1")))
			s.expect(ecRDS)
			s.expectAck(ecLDS, "l2", ln, nil)
			rn := s.send(ecRDS, "r-1", ecMsgs(ecRoute("r1", "gone")))
			s.expectAck(ecRDS, "r-1", rn, []string{"r1"})
			err := c.WaitWarm(100 * time.Millisecond)
			want := "RouteConfiguration r1: cluster gone is not an active cluster"
			if err == nil || !strings.Contains(err.Error(), want) || !slices.Contains(c.Dangling(), want) {
				t.Errorf("WaitWarm = %v, Dangling = %v; want %q", err, c.Dangling(), want)
			}
		})
		t.Run("a secret never served", func(t *testing.T) {
			s, c := startScripted(t, mode)
			s.expect(ecCDS)
			cn := s.send(ecCDS, "c1", ecMsgs(secretRef))
			for range 2 { // EDS and SDS subscriptions, in either order
				if r := s.next(); r.typeURL != ecEDS && r.typeURL != ecSDS {
					t.Fatalf("got %v, want the EDS and SDS subscriptions", r)
				}
			}
			s.expectAck(ecCDS, "c1", cn, nil)
			s.send(ecEDS, "e1", ecMsgs(ecAssignment("tls", "10.3.0.1")))
			// The EDS ACK, and LDS once the secret's 20ms initial_fetch_timeout
			// has expired: in either order, as the timer may fire first.
			types := []string{s.next().typeURL, s.next().typeURL}
			slices.Sort(types)
			if !slices.Equal(types, []string{ecEDS, ecLDS}) {
				t.Fatalf("requests for %v, want the EDS ACK and LDS", types)
			}
			want := "Cluster tls: Secret cert was never received"
			if err := c.WaitWarm(100 * time.Millisecond); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("WaitWarm = %v, want %q", err, want)
			}
		})
	})
}

func TestEnvoyClientInitialFetchTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		active  bool
	}{
		{"expiry makes the cluster active with no endpoints", 50 * time.Millisecond, true},
		{"zero waits forever", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ecBothModes(t, func(t *testing.T, mode Mode) {
				s, c := startScripted(t, mode)
				s.expect(ecCDS)
				cn := s.send(ecCDS, "c1", ecMsgs(ecCluster("a", clusterv3.Cluster_ROUND_ROBIN, tc.timeout)))
				s.expect(ecEDS)
				s.expectAck(ecCDS, "c1", cn, nil)
				if !tc.active {
					s.quiet(300 * time.Millisecond)
					if err := c.WaitWarm(10 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "Cluster a warming") {
						t.Errorf("WaitWarm = %v, want cluster a still warming", err)
					}
					return
				}
				// Cluster initialization ends at the timeout, so LDS starts.
				s.expect(ecLDS)
				if c.Cluster("a") == nil || c.Endpoints("a") != nil {
					t.Errorf("after the timeout cluster a is %v with endpoints %v, want active with none", c.Cluster("a"), c.Endpoints("a"))
				}
				want := "Cluster a: active without ClusterLoadAssignment a"
				if d := c.Dangling(); !slices.Equal(d, []string{want}) {
					t.Errorf("Dangling = %v, want [%s]", d, want)
				}
			})
		})
	}
}

// In delta, a server that lists a requested assignment in removed_resources
// says it does not exist; Envoy's EDS cluster then initializes with no
// endpoints instead of waiting.
func TestEnvoyClientDeltaRemovedAssignmentEndsWarming(t *testing.T) {
	s, c := startScripted(t, Delta)
	s.expect(ecCDS)
	cn := s.send(ecCDS, "c1", ecMsgs(ecCluster("a", clusterv3.Cluster_ROUND_ROBIN, 0)))
	s.expect(ecEDS)
	s.expectAck(ecCDS, "c1", cn, nil)
	s.send(ecEDS, "e1", nil, "a")
	s.expect(ecLDS) // cluster initialization is over
	if c.Cluster("a") == nil || c.Endpoints("a") != nil {
		t.Errorf("cluster a is %v with endpoints %v, want active with none", c.Cluster("a"), c.Endpoints("a"))
	}
	if d := c.Dangling(); !slices.Equal(d, []string{"Cluster a: active without ClusterLoadAssignment a"}) {
		t.Errorf("Dangling = %v, want the missing assignment", d)
	}
}

// TestEnvoyClientReplacedWarmingKeepsSecret: a cluster whose warming
// version is replaced keeps the secret both versions name, as Envoy builds
// the new version before it drops the old: the new one warms on the
// secret already received, and the server owes no second response of it.
func TestEnvoyClientReplacedWarmingKeepsSecret(t *testing.T) {
	tlsCluster := func(lb clusterv3.Cluster_LbPolicy) *clusterv3.Cluster {
		c := ecCluster("tls", lb, 0)
		tlsCtx, err := anypb.New(&tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: "cert", SdsConfig: ecADS(0)}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		c.TransportSocket = &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tlsCtx}}
		return c
	}
	ecBothModes(t, func(t *testing.T, mode Mode) {
		s, c := startScripted(t, mode)
		s.expect(ecCDS)
		s.send(ecCDS, "c1", ecMsgs(tlsCluster(clusterv3.Cluster_ROUND_ROBIN)))
		s.send(ecSDS, "s1", ecMsgs(&tlsv3.Secret{Name: "cert"}))
		s.send(ecCDS, "c2", ecMsgs(tlsCluster(clusterv3.Cluster_LEAST_REQUEST)))
		s.send(ecEDS, "e1", ecMsgs(ecAssignment("tls", "10.3.0.1")))
		s.send(ecLDS, "l1", nil)
		c.RequireWarm(ecWaitLimit, func(snap Snapshot) error {
			if got := snap.Clusters["tls"].GetLbPolicy(); got != clusterv3.Cluster_LEAST_REQUEST {
				return fmt.Errorf("cluster tls serves with %v, want the second version's LEAST_REQUEST", got)
			}
			return nil
		})
	})
}
