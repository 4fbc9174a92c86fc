package xdstest

import (
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	xdstype "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// These tests hold the simulation itself to Envoy's documented semantics,
// on hand-written configuration; the generators' simulation tests live
// beside the generators.

func addr(ip string, port uint32) *core.Address {
	return &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
		Address: ip, PortSpecifier: &core.SocketAddress_PortValue{PortValue: port}}}}
}

func packed(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func tcpChain(t *testing.T, name, clusterName string, match *listener.FilterChainMatch) *listener.FilterChain {
	return &listener.FilterChain{Name: name, FilterChainMatch: match, Filters: []*listener.Filter{{
		Name:       "envoy.filters.network.tcp_proxy",
		ConfigType: &listener.Filter_TypedConfig{TypedConfig: packed(t, &tcp.TcpProxy{StatPrefix: clusterName, ClusterSpecifier: &tcp.TcpProxy_Cluster{Cluster: clusterName}})},
	}}}
}

func rdsChain(t *testing.T, routeName string, match *listener.FilterChainMatch) *listener.FilterChain {
	return &listener.FilterChain{FilterChainMatch: match, Filters: []*listener.Filter{{
		Name: "envoy.filters.network.http_connection_manager",
		ConfigType: &listener.Filter_TypedConfig{TypedConfig: packed(t, &hcm.HttpConnectionManager{
			StatPrefix:     routeName,
			RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{RouteConfigName: routeName}},
		})},
	}}}
}

func staticCluster(name string, eps ...*endpoint.LocalityLbEndpoints) (*cluster.Cluster, *endpoint.ClusterLoadAssignment) {
	return &cluster.Cluster{Name: name, ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS}},
		&endpoint.ClusterLoadAssignment{ClusterName: name, Endpoints: eps}
}

func group(priority, weight uint32, hosts ...*endpoint.LbEndpoint) *endpoint.LocalityLbEndpoints {
	g := &endpoint.LocalityLbEndpoints{Priority: priority, LbEndpoints: hosts}
	if weight > 0 {
		g.LoadBalancingWeight = wrapperspb.UInt32(weight)
	}
	return g
}

func host(ip string, status core.HealthStatus) *endpoint.LbEndpoint {
	return &endpoint.LbEndpoint{HealthStatus: status, HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{Address: addr(ip, 80)}}}
}

func routeTo(name, clusterName string, match *route.RouteMatch) *route.Route {
	return &route.Route{Name: name, Match: match, Action: &route.Route_Route{Route: &route.RouteAction{
		ClusterSpecifier: &route.RouteAction_Cluster{Cluster: clusterName}}}}
}

// TestSimulationListenersAndRoutes: handoff by original destination,
// filter chain match, virtual host domain order, first matching route.
func TestSimulationListenersAndRoutes(t *testing.T) {
	const healthy = core.HealthStatus_HEALTHY
	var msgs []proto.Message
	msgs = append(msgs,
		&listener.Listener{Name: "virtual", Address: addr("0.0.0.0", 15001), UseOriginalDst: wrapperspb.Bool(true),
			FilterChains: []*listener.FilterChain{tcpChain(t, "catchall", "passthrough", nil)}},
		&listener.Listener{Name: "exact", Address: addr("10.0.0.1", 9000), BindToPort: wrapperspb.Bool(false),
			FilterChains: []*listener.FilterChain{tcpChain(t, "exact-chain", "a", nil)}},
		&listener.Listener{Name: "wild", Address: addr("0.0.0.0", 9000), BindToPort: wrapperspb.Bool(false),
			FilterChains: []*listener.FilterChain{
				tcpChain(t, "sni-exact", "b", &listener.FilterChainMatch{ServerNames: []string{"api.example.com"}}),
				tcpChain(t, "sni-wild", "c", &listener.FilterChainMatch{ServerNames: []string{"*.example.com"}}),
				tcpChain(t, "sni-none", "a", nil),
			}},
		&listener.Listener{Name: "ports", Address: addr("0.0.0.0", 9100), BindToPort: wrapperspb.Bool(false),
			FilterChains: []*listener.FilterChain{
				// The destination port is decided first: the port chain
				// wins although another has a matching server name.
				tcpChain(t, "port", "a", &listener.FilterChainMatch{DestinationPort: wrapperspb.UInt32(9100), ServerNames: []string{"x.example.com"}}),
				tcpChain(t, "name", "b", &listener.FilterChainMatch{ServerNames: []string{"y.example.com"}}),
			}},
		&listener.Listener{Name: "http", Address: addr("0.0.0.0", 80), BindToPort: wrapperspb.Bool(false),
			FilterChains: []*listener.FilterChain{rdsChain(t, "80", nil)}},
		&listener.Listener{Name: "any-port", Address: addr("0.0.0.0", 82), BindToPort: wrapperspb.Bool(false),
			FilterChains: []*listener.FilterChain{rdsChain(t, "82", nil)}},
		&route.RouteConfiguration{Name: "82", IgnorePortInHostMatching: true, VirtualHosts: []*route.VirtualHost{
			{Name: "any", Domains: []string{"*"}, Routes: []*route.Route{routeTo("any", "a", &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}})}},
			{Name: "named", Domains: []string{"www.foo.com", "[fd00::1]"}, Routes: []*route.Route{routeTo("named", "b", &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}})}},
		}},
		&listener.Listener{Name: "dangling", Address: addr("0.0.0.0", 81), BindToPort: wrapperspb.Bool(false),
			FilterChains: []*listener.FilterChain{rdsChain(t, "missing", nil)}},
		&cluster.Cluster{Name: "passthrough", ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST}},
		&route.RouteConfiguration{Name: "80", VirtualHosts: []*route.VirtualHost{
			{Name: "any", Domains: []string{"*"}, Routes: []*route.Route{routeTo("any", "a", &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}})}},
			{Name: "prefix-wild", Domains: []string{"foo.*"}, Routes: []*route.Route{routeTo("pw", "a", &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}})}},
			{Name: "short-suffix", Domains: []string{"*.com"}, Routes: []*route.Route{routeTo("ss", "a", &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}})}},
			{Name: "long-suffix", Domains: []string{"*.foo.com"}, Routes: []*route.Route{routeTo("ls", "a", &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}})}},
			{Name: "exact", Domains: []string{"www.foo.com", "www.foo.com:80"}, Routes: []*route.Route{
				routeTo("sep", "b", &route.RouteMatch{PathSpecifier: &route.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: "/api"}}),
				routeTo("exact-path", "c", &route.RouteMatch{PathSpecifier: &route.RouteMatch_Path{Path: "/exact"}}),
				routeTo("regex", "c", &route.RouteMatch{PathSpecifier: &route.RouteMatch_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: "/v[0-9]+"}}}),
				routeTo("header", "b", &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/h"},
					Headers: []*route.HeaderMatcher{{Name: "x-canary", HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "yes"}}}}}}),
				routeTo("query", "c", &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/h"},
					QueryParameters: []*route.QueryParameterMatcher{{Name: "v", QueryParameterMatchSpecifier: &route.QueryParameterMatcher_PresentMatch{PresentMatch: true}}}}),
				{Name: "split", Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/split"}}, Action: &route.Route_Route{Route: &route.RouteAction{
					ClusterSpecifier: &route.RouteAction_WeightedClusters{WeightedClusters: &route.WeightedCluster{Clusters: []*route.WeightedCluster_ClusterWeight{
						{Name: "a", Weight: wrapperspb.UInt32(90)}, {Name: "b", Weight: wrapperspb.UInt32(10)}}}}}}},
				routeTo("late", "a", &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}}),
			}},
		}},
	)
	for _, name := range []string{"a", "b", "c"} {
		c, cla := staticCluster(name, group(0, 0, host("10.9.0."+map[string]string{"a": "1", "b": "2", "c": "3"}[name], healthy)))
		msgs = append(msgs, c, cla)
	}
	sim, err := NewSimulation(msgs...)
	if err != nil {
		t.Fatal(err)
	}
	a := []Endpoint{{Address: "10.9.0.1:80"}}
	b := []Endpoint{{Address: "10.9.0.2:80"}}
	c := []Endpoint{{Address: "10.9.0.3:80"}}
	type want struct {
		outcome                          Outcome
		listener, chain, vhost, routeNam string
		cluster                          string
		endpoints                        []Endpoint
		weighted                         []WeightedCluster
	}
	cases := []struct {
		name string
		req  Request
		want want
	}{
		{"exact address beats the wildcard listener", Request{DestinationIP: "10.0.0.1", Port: 9000},
			want{OutcomeRouted, "exact", "exact-chain", "", "", "a", a, nil}},
		{"wildcard listener on the port, no SNI: chain without server names", Request{DestinationIP: "10.0.0.2", Port: 9000},
			want{OutcomeRouted, "wild", "sni-none", "", "", "a", a, nil}},
		{"exact SNI beats the wildcard", Request{DestinationIP: "10.0.0.2", Port: 9000, SNI: "api.example.com"},
			want{OutcomeRouted, "wild", "sni-exact", "", "", "b", b, nil}},
		{"wildcard SNI covers deeper names", Request{DestinationIP: "10.0.0.2", Port: 9000, SNI: "a.b.example.com"},
			want{OutcomeRouted, "wild", "sni-wild", "", "", "c", c, nil}},
		{"wildcard SNI does not cover the bare domain", Request{DestinationIP: "10.0.0.2", Port: 9000, SNI: "example.com"},
			want{OutcomeRouted, "wild", "sni-none", "", "", "a", a, nil}},
		{"destination port first, no backtracking", Request{DestinationIP: "10.0.0.2", Port: 9100, SNI: "y.example.com"},
			want{OutcomeNoListener, "ports", "", "", "", "", nil, nil}},
		{"no listener for the port: the receiving listener's own chain", Request{DestinationIP: "10.0.0.3", Port: 7000},
			want{OutcomeRouted, "virtual", "catchall", "", "", "passthrough", []Endpoint{{Address: "10.0.0.3:7000"}}, nil}},
		{"RDS name without a configuration dangles", Request{DestinationIP: "10.0.0.3", Port: 81, Host: "x", Path: "/"},
			want{OutcomeDangling, "dangling", "#0", "", "", "", nil, nil}},
		{"exact domain first", Request{DestinationIP: "10.0.0.4", Port: 80, Host: "WWW.foo.com", Path: "/zzz"},
			want{OutcomeRouted, "http", "#0", "exact", "late", "a", a, nil}},
		{"exact domain with port", Request{DestinationIP: "10.0.0.4", Port: 80, Host: "www.foo.com:80", Path: "/exact?x=1"},
			want{OutcomeRouted, "http", "#0", "exact", "exact-path", "c", c, nil}},
		{"a port the domains lack: only * matches", Request{DestinationIP: "10.0.0.4", Port: 80, Host: "www.foo.com:8080", Path: "/"},
			want{OutcomeRouted, "http", "#0", "any", "any", "a", a, nil}},
		{"ignore_port_in_host_matching: any port", Request{DestinationIP: "10.0.0.4", Port: 82, Host: "www.foo.com:8080", Path: "/"},
			want{OutcomeRouted, "any-port", "#0", "named", "named", "b", b, nil}},
		{"ignore_port_in_host_matching: no port", Request{DestinationIP: "10.0.0.4", Port: 82, Host: "www.foo.com", Path: "/"},
			want{OutcomeRouted, "any-port", "#0", "named", "named", "b", b, nil}},
		{"ignore_port_in_host_matching: bracketed IPv6", Request{DestinationIP: "10.0.0.4", Port: 82, Host: "[fd00::1]:82", Path: "/"},
			want{OutcomeRouted, "any-port", "#0", "named", "named", "b", b, nil}},
		{"longest suffix wildcard", Request{DestinationIP: "10.0.0.4", Port: 80, Host: "foo.foo.com", Path: "/"},
			want{OutcomeRouted, "http", "#0", "long-suffix", "ls", "a", a, nil}},
		{"suffix wildcard before prefix wildcard", Request{DestinationIP: "10.0.0.4", Port: 80, Host: "foo.bar.com", Path: "/"},
			want{OutcomeRouted, "http", "#0", "short-suffix", "ss", "a", a, nil}},
		{"prefix wildcard before *", Request{DestinationIP: "10.0.0.4", Port: 80, Host: "foo.org", Path: "/"},
			want{OutcomeRouted, "http", "#0", "prefix-wild", "pw", "a", a, nil}},
		{"* last", Request{DestinationIP: "10.0.0.4", Port: 80, Host: "bar.org", Path: "/"},
			want{OutcomeRouted, "http", "#0", "any", "any", "a", a, nil}},
		{"path_separated_prefix: the prefix itself", Request{DestinationIP: "10.0.0.4", Port: 80, Host: "www.foo.com", Path: "/api?q=1"},
			want{OutcomeRouted, "http", "#0", "exact", "sep", "b", b, nil}},
		{"path_separated_prefix: below it", Request{DestinationIP: "10.0.0.4", Port: 80, Host: "www.foo.com", Path: "/api/v1"},
			want{OutcomeRouted, "http", "#0", "exact", "sep", "b", b, nil}},
		{"path_separated_prefix: not another element", Request{DestinationIP: "10.0.0.4", Port: 80, Host: "www.foo.com", Path: "/apix"},
			want{OutcomeRouted, "http", "#0", "exact", "late", "a", a, nil}},
		{"exact path ignores the query, not case", Request{DestinationIP: "10.0.0.4", Port: 80, Host: "www.foo.com", Path: "/Exact"},
			want{OutcomeRouted, "http", "#0", "exact", "late", "a", a, nil}},
		{"safe_regex matches the whole path", Request{DestinationIP: "10.0.0.4", Port: 80, Host: "www.foo.com", Path: "/v12?x"},
			want{OutcomeRouted, "http", "#0", "exact", "regex", "c", c, nil}},
		{"safe_regex does not match a longer path", Request{DestinationIP: "10.0.0.4", Port: 80, Host: "www.foo.com", Path: "/v12/x"},
			want{OutcomeRouted, "http", "#0", "exact", "late", "a", a, nil}},
		{"header match", Request{DestinationIP: "10.0.0.4", Port: 80, Host: "www.foo.com", Path: "/h", Headers: map[string]string{"X-Canary": "yes"}},
			want{OutcomeRouted, "http", "#0", "exact", "header", "b", b, nil}},
		{"header mismatch falls to the next route", Request{DestinationIP: "10.0.0.4", Port: 80, Host: "www.foo.com", Path: "/h?v=2", Headers: map[string]string{"x-canary": "no"}},
			want{OutcomeRouted, "http", "#0", "exact", "query", "c", c, nil}},
		{"weighted clusters", Request{DestinationIP: "10.0.0.4", Port: 80, Host: "www.foo.com", Path: "/split"},
			want{OutcomeWeighted, "http", "#0", "exact", "split", "", nil, []WeightedCluster{{"a", 90}, {"b", 10}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := sim.Route(tc.req)
			got := want{r.Outcome, r.Listener, r.FilterChain, r.VirtualHost, r.Route, r.Cluster, r.Endpoints, r.Weighted}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("(-want +got):\n%s\ndetail: %s", diff, r.Detail)
			}
		})
	}
}

// TestSimulationAuthority: the :authority that route matching sees and the
// upstream receives. ignore_port_in_host_matching leaves it as sent;
// strip_any_host_port and host_rewrite_literal change it.
func TestSimulationAuthority(t *testing.T) {
	const healthy = core.HealthStatus_HEALTHY
	prefix := func(p string) *route.RouteMatch {
		return &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: p}}
	}
	rewritten := routeTo("rewrite", "a", prefix("/rewrite"))
	rewritten.GetRoute().HostRewriteSpecifier = &route.RouteAction_HostRewriteLiteral{HostRewriteLiteral: "backend.internal"}
	byAuthority := routeTo("by-authority", "a", prefix("/"))
	byAuthority.Match.Headers = []*route.HeaderMatcher{{Name: ":authority", HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{
		StringMatch: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "www.foo.com"}}}}}
	auto := routeTo("auto", "a", prefix("/auto"))
	auto.GetRoute().HostRewriteSpecifier = &route.RouteAction_AutoHostRewrite{AutoHostRewrite: wrapperspb.Bool(true)}
	stripping := &listener.FilterChain{Filters: []*listener.Filter{{
		Name: "envoy.filters.network.http_connection_manager",
		ConfigType: &listener.Filter_TypedConfig{TypedConfig: packed(t, &hcm.HttpConnectionManager{
			StatPrefix:     "strip",
			RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{RouteConfigName: "shared"}},
			StripPortMode:  &hcm.HttpConnectionManager_StripAnyHostPort{StripAnyHostPort: true},
		})},
	}}}
	c, cla := staticCluster("a", group(0, 0, host("10.9.0.1", healthy)))
	sim, err := NewSimulation(
		&listener.Listener{Name: "virtual", Address: addr("0.0.0.0", 15001), UseOriginalDst: wrapperspb.Bool(true)},
		&listener.Listener{Name: "keep", Address: addr("0.0.0.0", 80), BindToPort: wrapperspb.Bool(false),
			FilterChains: []*listener.FilterChain{rdsChain(t, "shared", nil)}},
		&listener.Listener{Name: "strip", Address: addr("0.0.0.0", 81), BindToPort: wrapperspb.Bool(false),
			FilterChains: []*listener.FilterChain{stripping}},
		&route.RouteConfiguration{Name: "shared", IgnorePortInHostMatching: true, VirtualHosts: []*route.VirtualHost{{
			Name: "foo", Domains: []string{"www.foo.com", "[fd00::1]"},
			Routes: []*route.Route{rewritten, auto, byAuthority, routeTo("default", "a", prefix("/"))},
		}}},
		c, cla,
	)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name             string
		req              Request
		route, authority string
	}{
		{"the port only ignored for the match: kept", Request{DestinationIP: "10.0.0.4", Port: 80, Host: "WWW.foo.com:8080", Path: "/"}, "default", "WWW.foo.com:8080"},
		{"strip_any_host_port drops it, before route matching", Request{DestinationIP: "10.0.0.4", Port: 81, Host: "www.foo.com:8080", Path: "/"}, "by-authority", "www.foo.com"},
		{"strip_any_host_port keeps an IPv6 address's brackets", Request{DestinationIP: "10.0.0.4", Port: 81, Host: "[fd00::1]:8080", Path: "/"}, "default", "[fd00::1]"},
		{"host_rewrite_literal replaces it", Request{DestinationIP: "10.0.0.4", Port: 80, Host: "www.foo.com:8080", Path: "/rewrite"}, "rewrite", "backend.internal"},
		{"other host rewrites are not modelled", Request{DestinationIP: "10.0.0.4", Port: 80, Host: "www.foo.com", Path: "/auto"}, "auto", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := sim.Route(tc.req)
			if r.Outcome != OutcomeRouted || r.VirtualHost != "foo" || r.Route != tc.route {
				t.Fatalf("outcome %v at virtual host %q, route %q, want route %q: %s", r.Outcome, r.VirtualHost, r.Route, tc.route, r.Detail)
			}
			if r.Authority != tc.authority {
				t.Errorf("authority %q, want %q", r.Authority, tc.authority)
			}
		})
	}
}

// TestSimulationPriorities: Envoy's priority levels and panic threshold
// (arch_overview/upstream/load_balancing/priority, panic_threshold) and
// locality weights (locality_weight), default overprovisioning factor 1.4.
func TestSimulationPriorities(t *testing.T) {
	const (
		up   = core.HealthStatus_HEALTHY
		down = core.HealthStatus_UNHEALTHY
		unk  = core.HealthStatus_UNKNOWN
	)
	cases := []struct {
		name      string
		weighted  bool
		panicZero bool
		groups    []*endpoint.LocalityLbEndpoints
		want      []Endpoint
		panic     bool
		outcome   Outcome
	}{
		{name: "healthy priority 0 takes everything",
			groups: []*endpoint.LocalityLbEndpoints{group(0, 0, host("10.0.0.1", up)), group(1, 0, host("10.0.1.1", up))},
			want:   []Endpoint{{Address: "10.0.0.1:80"}}, outcome: OutcomeRouted},
		{name: "UNKNOWN counts as healthy",
			groups: []*endpoint.LocalityLbEndpoints{group(0, 0, host("10.0.0.1", unk)), group(1, 0, host("10.0.1.1", up))},
			want:   []Endpoint{{Address: "10.0.0.1:80"}}, outcome: OutcomeRouted},
		{name: "3 of 4 healthy is 105%: no spill",
			groups: []*endpoint.LocalityLbEndpoints{group(0, 0, host("10.0.0.1", up), host("10.0.0.2", up), host("10.0.0.3", up), host("10.0.0.4", down)), group(1, 0, host("10.0.1.1", up))},
			want:   []Endpoint{{Address: "10.0.0.1:80"}, {Address: "10.0.0.2:80"}, {Address: "10.0.0.3:80"}}, outcome: OutcomeRouted},
		{name: "1 of 2 healthy is 70%: priority 1 takes the rest",
			groups: []*endpoint.LocalityLbEndpoints{group(0, 0, host("10.0.0.1", up), host("10.0.0.2", down)), group(1, 0, host("10.0.1.1", up))},
			want:   []Endpoint{{Address: "10.0.0.1:80"}, {Address: "10.0.1.1:80", Priority: 1}}, outcome: OutcomeRouted},
		{name: "priority 0 all down: priority 1 only",
			groups: []*endpoint.LocalityLbEndpoints{group(0, 0, host("10.0.0.1", down)), group(1, 0, host("10.0.1.1", up)), group(2, 0, host("10.0.2.1", up))},
			want:   []Endpoint{{Address: "10.0.1.1:80", Priority: 1}}, outcome: OutcomeRouted},
		{name: "everything down: priority 0 in panic",
			groups: []*endpoint.LocalityLbEndpoints{group(0, 0, host("10.0.0.1", down)), group(1, 0, host("10.0.1.1", down))},
			want:   []Endpoint{{Address: "10.0.0.1:80"}}, panic: true, outcome: OutcomeRouted},
		{name: "everything down, panic threshold 0: nothing", panicZero: true,
			groups:  []*endpoint.LocalityLbEndpoints{group(0, 0, host("10.0.0.1", down)), group(1, 0, host("10.0.1.1", down))},
			outcome: OutcomeNoHealthyUpstream},
		{name: "1 of 3 healthy, alone: 46% is below the 50% threshold, panic",
			groups: []*endpoint.LocalityLbEndpoints{group(0, 0, host("10.0.0.1", up), host("10.0.0.2", down), host("10.0.0.3", down))},
			want:   []Endpoint{{Address: "10.0.0.1:80"}, {Address: "10.0.0.2:80"}, {Address: "10.0.0.3:80"}}, panic: true, outcome: OutcomeRouted},
		{name: "locality weights; a locality without weight gets nothing", weighted: true,
			groups: []*endpoint.LocalityLbEndpoints{group(0, 80, host("10.0.0.1", up)), group(0, 20, host("10.0.0.2", up)), group(0, 0, host("10.0.0.3", up))},
			want:   []Endpoint{{Address: "10.0.0.1:80", LocalityWeight: 80}, {Address: "10.0.0.2:80", LocalityWeight: 20}}, outcome: OutcomeRouted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, cla := staticCluster("c", tc.groups...)
			c.CommonLbConfig = &cluster.Cluster_CommonLbConfig{}
			if tc.weighted {
				c.CommonLbConfig.LocalityConfigSpecifier = &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
					LocalityWeightedLbConfig: &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig{}}
			}
			if tc.panicZero {
				c.CommonLbConfig.HealthyPanicThreshold = &xdstype.Percent{}
			}
			sim, err := NewSimulation(c, cla)
			if err != nil {
				t.Fatal(err)
			}
			up, outcome, detail := sim.Cluster("c", Request{})
			if outcome != tc.outcome || up.Panic != tc.panic {
				t.Errorf("outcome %q panic %v, want %q panic %v (%s)", outcome, up.Panic, tc.outcome, tc.panic, detail)
			}
			if diff := cmp.Diff(tc.want, up.Endpoints); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSimulationClusterOutcomes: a cluster CDS did not send, and an EDS
// cluster whose load assignment has not arrived (Envoy keeps it warming).
func TestSimulationClusterOutcomes(t *testing.T) {
	sim, err := NewSimulation(
		&cluster.Cluster{Name: "warming", ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
			EdsClusterConfig: &cluster.Cluster_EdsClusterConfig{ServiceName: "warming-eds"}},
		// The assignment carries the cluster's own name, not its
		// service_name, so it does not serve the cluster.
		&endpoint.ClusterLoadAssignment{ClusterName: "warming"},
	)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		cluster string
		want    Outcome
	}{
		{"missing", OutcomeNoCluster},
		{"warming", OutcomeDangling},
	}
	for _, tc := range cases {
		if _, got, detail := sim.Cluster(tc.cluster, Request{}); got != tc.want {
			t.Errorf("%s: %q (%s), want %q", tc.cluster, got, detail, tc.want)
		}
	}
}
