package xds

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
	"github.com/meshpilot/meshpilot/pkg/xds/envoygen"
)

// warmingGenerators are Envoy's generators plus the barrier probe.
func warmingGenerators() map[string]Generator {
	set := stampedGenerators()
	for typeURL, g := range envoygen.New(envoygen.Options{DomainSuffix: "cluster.local"}).ByTypeURL() {
		set[typeURL] = g
	}
	return set
}

func seedWarming(s model.Store) {
	upsertService(s, "a", nil, nil)
	setHTTPEndpoints(s, "a", "10.8.0.1")
	upsertService(s, "b", nil, nil)
	setHTTPEndpoints(s, "b", "10.8.0.2")
}

func simpleLB(lb networking.LoadBalancerSettings_SimpleLB) *networking.TrafficPolicy {
	return &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
		LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: lb}}}
}

// clusterChanges are DestinationRule edits that change a cluster but not its
// endpoints: after each, Envoy holds the new cluster warming until it gets
// the load assignment again.
var clusterChanges = []struct {
	name   string
	policy *networking.TrafficPolicy
}{
	{"load balancer", simpleLB(networking.LoadBalancerSettings_ROUND_ROBIN)},
	{"connection pool", &networking.TrafficPolicy{ConnectionPool: &networking.ConnectionPoolSettings{
		Tcp: &networking.ConnectionPoolSettings_TCPSettings{MaxConnections: 7}}}},
	{"tls", &networking.TrafficPolicy{Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE}}},
}

var outboundA = "outbound|80||" + hostname("a")

func TestSotWChangedClusterGetsItsEndpointsAgain(t *testing.T) {
	for _, tc := range clusterChanges {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{seed: seedWarming, generators: warmingGenerators()})
			c := h.sotw("client")
			cds := c.subscribe(ClusterType)
			c.ack(cds)
			eds := c.subscribe(EndpointType, outboundA, "outbound|80||"+hostname("b"))
			c.ack(eds, outboundA, "outbound|80||"+hostname("b"))
			c.expectQuiet("after the ACKs")

			upsertRule(h.store, "a", hostname("a"), &networking.DestinationRule{TrafficPolicy: tc.policy})
			cds2 := c.expect(ClusterType)
			eds2 := c.expect(EndpointType)
			if got := names(eds2.GetResources(), resourceName); !slices.Equal(got, []string{outboundA}) {
				t.Fatalf("EDS after the CDS update = %v, want exactly the changed cluster's %s", got, outboundA)
			}
			if eds2.GetNonce() == eds.GetNonce() {
				t.Fatal("the re-sent load assignment reused a nonce")
			}
			// Envoy's re-request, sent while it processed the CDS update,
			// carries the EDS nonce it had then: stale, and answered by the
			// response already on its way.
			c.send(&discoveryv3.DiscoveryRequest{TypeUrl: EndpointType, VersionInfo: eds.GetVersionInfo(),
				ResponseNonce: eds.GetNonce(), ResourceNames: []string{outboundA, "outbound|80||" + hostname("b")}})
			c.ack(cds2)
			c.ack(eds2, outboundA, "outbound|80||"+hostname("b"))
			c.expectQuiet("after the re-request and the ACKs")
		})
	}
}

func TestDeltaChangedClusterGetsItsEndpointsAgain(t *testing.T) {
	for _, tc := range clusterChanges {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{seed: seedWarming, generators: warmingGenerators()})
			c := h.delta("client")
			c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ClusterType})
			c.ack(c.expect(ClusterType))
			c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: EndpointType,
				ResourceNamesSubscribe: []string{outboundA, "outbound|80||" + hostname("b")}})
			c.ack(c.expect(EndpointType))
			c.expectQuiet("after the ACKs")

			upsertRule(h.store, "a", hostname("a"), &networking.DestinationRule{TrafficPolicy: tc.policy})
			checkDelta(t, "CDS after the rule", c.expect(ClusterType), []string{outboundA}, nil)
			// Envoy's delta client sends no request for a subscription whose
			// names did not change: the server must send it unasked.
			eds := c.expect(EndpointType)
			checkDelta(t, "EDS after the CDS update", eds, []string{outboundA}, nil)
			c.ack(eds)
			c.expectQuiet("after the ACK")
		})
	}
}

// TestDeltaReconnectedClusterGetsItsEndpointsAgain: a delta client that
// opens a new stream reports the versions it holds, yet an EDS cluster it
// holds may be warming, and Envoy's EDS cluster warms until a response
// carries its load assignment, which the new stream's EDS request cannot
// ask for: it holds the assignment's current version. A cluster warms
// after a CDS update the old stream brought just before it broke, before
// the load assignment that followed; or after the new stream's CDS answer,
// sent before the server has read the EDS request that comes next. The
// first EDS answer of a stream carries every assignment subscribed to.
func TestDeltaReconnectedClusterGetsItsEndpointsAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		// updated: the client holds the changed cluster (a CDS response
		// reached it on the old stream, the EDS response after it not).
		updated bool
		// cds is what the new stream's CDS answer carries.
		cds []string
	}{
		{"cluster changed while away", false, []string{outboundA}},
		{"cluster warming when the stream broke", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{seed: seedWarming, generators: warmingGenerators()})
			assignments := []string{outboundA, "outbound|80||" + hostname("b")}
			old := h.delta("client")
			old.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ClusterType})
			cds := old.expect(ClusterType)
			old.ack(cds)
			old.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: assignments})
			eds := old.expect(EndpointType)
			old.ack(eds)
			clusters := deltaVersions(cds)

			upsertRule(h.store, "a", hostname("a"), &networking.DestinationRule{
				TrafficPolicy: simpleLB(networking.LoadBalancerSettings_RANDOM)})
			if changed := old.expect(ClusterType); tc.updated {
				maps.Copy(clusters, deltaVersions(changed))
			}

			again := h.delta("client")
			again.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ClusterType, InitialResourceVersions: clusters})
			checkDelta(t, "CDS on the new stream", again.expect(ClusterType), tc.cds, nil)
			again.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: assignments,
				InitialResourceVersions: deltaVersions(eds)})
			checkDelta(t, "EDS on the new stream", again.expect(EndpointType), assignments, nil)
		})
	}
}

// TestEnvoyWarmsAfterReconnecting: an Envoy that loses its stream while a
// cluster changes holds the old cluster until its new stream brings the
// new one, which then warms, and gets its endpoints.
func TestEnvoyWarmsAfterReconnecting(t *testing.T) {
	for _, mode := range []xdstest.Mode{xdstest.SotW, xdstest.Delta} {
		t.Run(mode.String(), func(t *testing.T) {
			h := newHarness(t, harnessConfig{seed: seedWarming, generators: warmingGenerators()})
			c := xdstest.NewEnvoyClient(t, h.dial(), envoyNode(t, "client"), mode)
			c.RequireWarm(waitLimit, hasEndpoints("a", 1))

			c.Disconnect()
			served := h.server.PushContext()
			upsertRule(h.store, "a", hostname("a"), &networking.DestinationRule{
				TrafficPolicy: simpleLB(networking.LoadBalancerSettings_RANDOM)})
			h.eventually("the rule to be served", func() bool { return h.server.PushContext() != served })
			c.Reconnect()
			c.RequireWarm(waitLimit, all(hasEndpoints("a", 1), func(s xdstest.Snapshot) error {
				if lb := s.Clusters[outboundA].GetLbPolicy(); lb != clusterv3.Cluster_RANDOM {
					return fmt.Errorf("cluster %s balances %v, want the rule's RANDOM", outboundA, lb)
				}
				return nil
			}))
		})
	}
}

// A cluster that did not change, or whose load assignment the client does
// not watch, is not re-sent.
func TestUnchangedClustersAreNotRewarmed(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedWarming, generators: warmingGenerators()})
	c := h.sotw("client")
	c.ack(c.subscribe(ClusterType))
	eds := c.subscribe(EndpointType, "outbound|80||"+hostname("b"))
	c.ack(eds, "outbound|80||"+hostname("b"))

	upsertRule(h.store, "a", hostname("a"), &networking.DestinationRule{
		TrafficPolicy: simpleLB(networking.LoadBalancerSettings_RANDOM)})
	cds := c.expect(ClusterType)
	if got := names(cds.GetResources(), resourceName); !slices.Contains(got, outboundA) {
		t.Fatalf("CDS after the rule = %v, want it to hold %s", got, outboundA)
	}
	c.expectQuiet("after a rule for a, whose load assignment the client does not watch")
}

// rdsListenerGenerators serve one listener whose HCM fetches route "80"
// over RDS; the listener changes with every push context, the route never.
func rdsListenerGenerators() map[string]Generator {
	set := stampedGenerators()
	set[ListenerType] = GeneratorFunc(func(_ *model.Proxy, pc *pushcontext.PushContext, _ *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
		m, err := anypb.New(&hcm.HttpConnectionManager{StatPrefix: pc.Version(),
			RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{RouteConfigName: "80"}}})
		if err != nil {
			return nil, err
		}
		l := &listenerv3.Listener{Name: "0.0.0.0_80", FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: m}}}}}}
		return model.Resources{{Name: l.GetName(), Resource: mustAny(l)}}, nil
	})
	set[RouteType] = GeneratorFunc(func(_ *model.Proxy, _ *pushcontext.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
		var out model.Resources
		for _, name := range w.ResourceNames {
			out = append(out, model.Resource{Name: name, Resource: mustAny(&routev3.RouteConfiguration{Name: name})})
		}
		return out, nil
	})
	return set
}

// tunnelRule changes listeners but not routes: the push leaves RDS out of
// its scope, so only warming can bring route 80 back.
func tunnelRule() *networking.DestinationRule {
	return &networking.DestinationRule{TrafficPolicy: &networking.TrafficPolicy{
		Tunnel: &networking.TrafficPolicy_TunnelSettings{TargetHost: "egress.example.com", TargetPort: 8443}}}
}

func TestChangedListenerGetsItsRoutesAgain(t *testing.T) {
	t.Run("sotw", func(t *testing.T) {
		h := newHarness(t, harnessConfig{seed: seedWarming, generators: rdsListenerGenerators()})
		c := h.sotw("client")
		c.ack(c.subscribe(ListenerType))
		rds := c.subscribe(RouteType, "80", "unrelated")
		c.ack(rds, "80", "unrelated")
		c.expectQuiet("after the ACKs")

		upsertRule(h.store, "a", hostname("a"), tunnelRule())
		c.expect(ListenerType)
		if got := names(c.expect(RouteType).GetResources(), resourceName); !slices.Equal(got, []string{"80"}) {
			t.Fatalf("RDS after the LDS update = %v, want the changed listener's route 80 alone", got)
		}
	})
	t.Run("delta", func(t *testing.T) {
		h := newHarness(t, harnessConfig{seed: seedWarming, generators: rdsListenerGenerators()})
		c := h.delta("client")
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ListenerType})
		c.ack(c.expect(ListenerType))
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: RouteType, ResourceNamesSubscribe: []string{"80", "unrelated"}})
		c.ack(c.expect(RouteType))
		c.expectQuiet("after the ACKs")

		upsertRule(h.store, "a", hostname("a"), tunnelRule())
		c.expect(ListenerType)
		checkDelta(t, "RDS after the LDS update", c.expect(RouteType), []string{"80"}, nil)
	})
}

// The load assignments re-sent for warming are generated once per served
// version and shared by identical proxies, not once per proxy.
func TestWarmingResendIsGeneratedOnce(t *testing.T) {
	set := warmingGenerators()
	eds := &countingGenerator{inner: set[EndpointType]}
	set[EndpointType] = eds
	h := newHarness(t, harnessConfig{seed: seedWarming, generators: set})
	const proxies = 5
	var clients []*deltaClient
	for i := range proxies {
		c := h.delta(fmt.Sprintf("twin-%d", i))
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ClusterType})
		c.ack(c.expect(ClusterType))
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{outboundA}})
		c.ack(c.expect(EndpointType))
		clients = append(clients, c)
	}
	before := eds.full.Load()
	upsertRule(h.store, "a", hostname("a"), &networking.DestinationRule{
		TrafficPolicy: simpleLB(networking.LoadBalancerSettings_ROUND_ROBIN)})
	for _, c := range clients {
		c.expect(ClusterType)
		checkDelta(t, "EDS after the CDS update", c.expect(EndpointType), []string{outboundA}, nil)
	}
	if got := eds.full.Load() - before; got != 1 {
		t.Fatalf("%d identical proxies re-sent their load assignment from %d generations, want 1", proxies, got)
	}
}

// TestEndpointsFollowTheirClustersInAPush: a push that changes a cluster
// and the listeners, but no endpoints, sends the cluster's load assignment
// (which Envoy waits for to warm the cluster) right after the CDS response,
// before LDS: make-before-break orders a push CDS, EDS, LDS, RDS.
// https://www.envoyproxy.io/docs/envoy/latest/api-docs/xds_protocol#eventual-consistency-considerations
func TestEndpointsFollowTheirClustersInAPush(t *testing.T) {
	// A changed TLS mode changes the cluster; a tunnel brings the
	// listeners into the push, and the stamped listener changes with
	// every push context.
	rule := &networking.DestinationRule{TrafficPolicy: &networking.TrafficPolicy{
		Tls:    &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE},
		Tunnel: &networking.TrafficPolicy_TunnelSettings{Protocol: "CONNECT", TargetHost: "proxy.example", TargetPort: 8080}}}
	generators := func() map[string]Generator {
		set := warmingGenerators()
		set[ListenerType] = &stampedGenerator{typeURL: ListenerType}
		return set
	}
	outboundB := "outbound|80||" + hostname("b")
	t.Run("sotw", func(t *testing.T) {
		h := newHarness(t, harnessConfig{seed: seedWarming, generators: generators()})
		c := h.sotw("client")
		c.ack(c.subscribe(ClusterType))
		c.ack(c.subscribe(EndpointType, outboundA, outboundB), outboundA, outboundB)
		c.ack(c.subscribe(ListenerType))
		c.expectQuiet("after the ACKs")

		upsertRule(h.store, "a", hostname("a"), rule)
		c.expect(ClusterType)
		if got := names(c.expect(EndpointType).GetResources(), resourceName); !slices.Equal(got, []string{outboundA}) {
			t.Fatalf("EDS after the CDS update = %v, want %s", got, outboundA)
		}
		c.expect(ListenerType)
	})
	t.Run("delta", func(t *testing.T) {
		h := newHarness(t, harnessConfig{seed: seedWarming, generators: generators()})
		c := h.delta("client")
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ClusterType})
		c.ack(c.expect(ClusterType))
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{outboundA, outboundB}})
		c.ack(c.expect(EndpointType))
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ListenerType})
		c.ack(c.expect(ListenerType))
		c.expectQuiet("after the ACKs")

		upsertRule(h.store, "a", hostname("a"), rule)
		c.expect(ClusterType)
		checkDelta(t, "EDS after the CDS update", c.expect(EndpointType), []string{outboundA}, nil)
		c.expect(ListenerType)
	})
}

// A push that changes one service's subsets (an incremental EDS push of its
// endpoints) and another's cluster: the second cluster's client waits for
// its load assignment, which the incremental push does not regenerate, and
// it must come in the same push all the same.
func TestEndpointsFollowTheirClustersBesideAnEndpointPush(t *testing.T) {
	outboundB := "outbound|80||" + hostname("b")
	change := func(h *harness) {
		upsertRule(h.store, "a", hostname("a"), subsetRule(networking.LoadBalancerSettings_LEAST_REQUEST, map[string]string{"version": "v1"}))
		upsertRule(h.store, "b", hostname("b"), &networking.DestinationRule{TrafficPolicy: simpleLB(networking.LoadBalancerSettings_ROUND_ROBIN)})
		h.pushNow(&model.PushRequest{Full: true, Start: time.Now(),
			ConfigsUpdated: map[model.ConfigKey]struct{}{ruleKey("a"): {}, ruleKey("b"): {}}})
	}
	t.Run("sotw", func(t *testing.T) {
		h := newHarness(t, harnessConfig{seed: seedWarming, generators: warmingGenerators(), noStoreHandler: true})
		c := h.sotw("client")
		c.ack(c.subscribe(ClusterType))
		c.ack(c.subscribe(EndpointType, outboundA, outboundB), outboundA, outboundB)
		c.expectQuiet("after the ACKs")

		change(h)
		c.expect(ClusterType)
		if got := names(c.expect(EndpointType).GetResources(), resourceName); !slices.Contains(got, outboundB) {
			t.Fatalf("EDS after the CDS update = %v, want %s among them", got, outboundB)
		}
	})
	t.Run("delta", func(t *testing.T) {
		h := newHarness(t, harnessConfig{seed: seedWarming, generators: warmingGenerators(), noStoreHandler: true})
		c := h.delta("client")
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ClusterType})
		c.ack(c.expect(ClusterType))
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{outboundA, outboundB}})
		c.ack(c.expect(EndpointType))
		c.expectQuiet("after the ACKs")

		change(h)
		c.expect(ClusterType)
		if got := deltaNames(c.expect(EndpointType)); !slices.Contains(got, outboundB) {
			t.Fatalf("EDS after the CDS update = %v, want %s among them", got, outboundB)
		}
	})
}
