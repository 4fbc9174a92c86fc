package loadtest

import (
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}
}

func TestSkimCluster(t *testing.T) {
	cases := []struct {
		name    string
		c       *clusterv3.Cluster
		wantEDS string
		wantMax uint32
	}{
		{"eds with service name", &clusterv3.Cluster{Name: "outbound|80||a.ns.svc.cluster.local",
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: "eds-a"},
			CircuitBreakers: &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{
				{MaxRequests: wrapperspb.UInt32(77), MaxConnections: wrapperspb.UInt32(5)}}}},
			"eds-a", 77},
		{"eds without service name", &clusterv3.Cluster{Name: "b",
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource()}}, "b", 0},
		{"static", &clusterv3.Cluster{Name: "c", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}}, "", 0},
		{"original destination", &clusterv3.Cluster{Name: "PassthroughCluster",
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST}}, "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := mustMarshal(t, tc.c)
			ci, err := skimCluster(b)
			if err != nil {
				t.Fatal(err)
			}
			if string(ci.name) != tc.c.GetName() || string(ci.edsName) != tc.wantEDS {
				t.Errorf("skimCluster = name %q eds %q, want name %q eds %q", ci.name, ci.edsName, tc.c.GetName(), tc.wantEDS)
			}
			n, err := clusterMaxRequests(b)
			if err != nil || n != tc.wantMax {
				t.Errorf("clusterMaxRequests = %d, %v; want %d", n, err, tc.wantMax)
			}
		})
	}
}

func TestClaHasAddress(t *testing.T) {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: "x", Endpoints: []*endpointv3.LocalityLbEndpoints{
		{LbEndpoints: []*endpointv3.LbEndpoint{testLbEndpoint("172.16.0.1"), testLbEndpoint("172.16.0.2")}},
		{LbEndpoints: []*endpointv3.LbEndpoint{testLbEndpoint(MarkerAddr(3))}},
	}}
	b := mustMarshal(t, cla)
	for _, tc := range []struct {
		addr string
		want bool
	}{{"172.16.0.2", true}, {MarkerAddr(3), true}, {MarkerAddr(4), false}, {"x", false}} {
		got, err := claHasAddress(b, tc.addr)
		if err != nil || got != tc.want {
			t.Errorf("claHasAddress(%q) = %v, %v; want %v", tc.addr, got, err, tc.want)
		}
	}
}

func testLbEndpoint(addr string) *endpointv3.LbEndpoint {
	return &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080}}}}}}}
}

func TestListenerRoutes(t *testing.T) {
	hcm := func(route string) *listenerv3.Filter {
		return &listenerv3.Filter{Name: "envoy.filters.network.http_connection_manager",
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, &hcmv3.HttpConnectionManager{
				RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{ConfigSource: adsSource(), RouteConfigName: route}}})}}
	}
	tcp := &listenerv3.Filter{Name: "envoy.filters.network.tcp_proxy",
		ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, &tcpv3.TcpProxy{StatPrefix: "s",
			ClusterSpecifier: &tcpv3.TcpProxy_Cluster{Cluster: "not-a-route"}})}}
	l := &listenerv3.Listener{Name: "0.0.0.0_80",
		FilterChains:       []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{hcm("80")}}, {Filters: []*listenerv3.Filter{tcp}}},
		DefaultFilterChain: &listenerv3.FilterChain{Filters: []*listenerv3.Filter{hcm("default")}}}
	got, err := listenerRoutes(mustMarshal(t, l))
	if err != nil || !slices.Equal(got, []string{"80", "default"}) {
		t.Errorf("listenerRoutes = %q, %v; want [80 default]", got, err)
	}
	api := &listenerv3.Listener{Name: "a.ns.svc.cluster.local:80", ApiListener: &listenerv3.ApiListener{
		ApiListener: mustAny(t, &hcmv3.HttpConnectionManager{RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{
			Rds: &hcmv3.Rds{ConfigSource: adsSource(), RouteConfigName: "a.ns.svc.cluster.local:80"}}})}}
	got, err = listenerRoutes(mustMarshal(t, api))
	if err != nil || !slices.Equal(got, []string{"a.ns.svc.cluster.local:80"}) {
		t.Errorf("listenerRoutes(api listener) = %q, %v", got, err)
	}
}

func TestRouteClusters(t *testing.T) {
	rc := &routev3.RouteConfiguration{Name: "r", VirtualHosts: []*routev3.VirtualHost{{Name: "v", Domains: []string{"*"},
		Routes: []*routev3.Route{
			{Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "one"}}}},
			{Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_WeightedClusters{
				WeightedClusters: &routev3.WeightedCluster{Clusters: []*routev3.WeightedCluster_ClusterWeight{{Name: "two"}, {Name: "three"}}}}}}},
			{Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 404}}},
		}}}}
	got, err := routeClusters(mustMarshal(t, rc))
	if err != nil || !slices.Equal(got, []string{"one", "two", "three"}) {
		t.Errorf("routeClusters = %q, %v", got, err)
	}
}

func TestSkimResponse(t *testing.T) {
	c1 := &clusterv3.Cluster{Name: "c1"}
	c2 := &clusterv3.Cluster{Name: "c2"}
	sotw := mustMarshal(t, &discoveryv3.DiscoveryResponse{VersionInfo: "v7", Nonce: "n1", TypeUrl: ClusterType,
		Resources: []*anypb.Any{mustAny(t, c1), mustAny(t, c2)}})
	// One response skims both, as a client reuses it: nothing of the first
	// may remain in the second.
	r := &response{}
	if err := skimResponse(sotw, false, r); err != nil {
		t.Fatal(err)
	}
	if r.version != "v7" || r.nonce != "n1" || r.typeURL != ClusterType || len(r.resources) != 2 ||
		string(r.resources[0].name) != "c1" || string(r.resources[1].name) != "c2" || !slices.Equal(r.resources[1].value, mustMarshal(t, c2)) {
		t.Errorf("skimResponse(sotw) = %+v", r)
	}
	delta := mustMarshal(t, &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: "s", Nonce: "n2", TypeUrl: EndpointType,
		Resources:        []*discoveryv3.Resource{{Name: "e1", Version: "1", Resource: mustAny(t, &endpointv3.ClusterLoadAssignment{ClusterName: "e1"})}},
		RemovedResources: []string{"gone"}})
	if err := skimResponse(delta, true, r); err != nil {
		t.Fatal(err)
	}
	if r.version != "s" || r.nonce != "n2" || r.typeURL != EndpointType || len(r.resources) != 1 ||
		string(r.resources[0].name) != "e1" || !slices.Equal(r.removed, []string{"gone"}) {
		t.Errorf("skimResponse(delta) = %+v", r)
	}
}

// TestSkimMalformed feeds truncated and garbage input: an error, never a
// panic.
func TestSkimMalformed(t *testing.T) {
	good := mustMarshal(t, &discoveryv3.DiscoveryResponse{VersionInfo: "v", TypeUrl: ClusterType,
		Resources: []*anypb.Any{mustAny(t, &clusterv3.Cluster{Name: "c"})}})
	inputs := [][]byte{{0xff}, {0x12, 0x7f, 0x01}, {0x0a}, good[:len(good)-1]}
	for _, in := range inputs {
		for _, delta := range []bool{false, true} {
			if err := skimResponse(in, delta, &response{}); err == nil {
				t.Errorf("skimResponse(%x, delta=%v): no error", in, delta)
			}
		}
		if _, err := skimCluster(in); err == nil {
			t.Errorf("skimCluster(%x): no error", in)
		}
	}
}
