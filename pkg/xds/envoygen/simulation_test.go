package envoygen

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// Simulation tests route requests through what the generators give each
// proxy of a fixture (testdata/simulation/<name>.yaml) and assert where
// they end up. The expected values come from Istio's documented behaviour
// and Envoy's matching rules, never from the generators.

// simulations generates LDS, RDS (the names the listeners use), CDS and
// EDS (the clusters' load assignments) for every TestProxy of the fixture,
// as Envoy would ask, from one generator set, and returns each proxy's
// simulation by TestProxy name.
func simulations(t *testing.T, name string) map[string]*xdstest.Simulation {
	t.Helper()
	return simulationsOf(t, filepath.Join("testdata", "simulation", name+".yaml"))
}

// simulationsOf is simulations of the fixture at path, so that a golden
// input can be routed through as well as rendered.
func simulationsOf(t *testing.T, path string) map[string]*xdstest.Simulation {
	t.Helper()
	f := loadFixture(t, path)
	set := New(Options{})
	push := pushcontext.Build(f.store, gatewayTestPushOptions(), nil, nil)
	sims := map[string]*xdstest.Simulation{}
	for _, tp := range f.proxies {
		proxy := tp.model()
		listeners, routes, _ := generateListenersAndRoutes(t, set.Listeners, set.Routes, tp, proxy, push)
		cw := &model.WatchedResource{TypeURL: ClusterType, Wildcard: true}
		clusters := generateTwice(t, set.Clusters, proxy, push, cw)
		checkResources(t, cw, clusters)
		ew := &model.WatchedResource{TypeURL: EndpointType, ResourceNames: edsClusterNames(t, clusters)}
		endpoints := generateTwice(t, set.Endpoints, proxy, push, ew)
		checkResources(t, ew, endpoints)
		sim, err := xdstest.SimulationOf(listeners, routes, clusters, endpoints)
		if err != nil {
			t.Fatal(err)
		}
		sims[tp.Name] = sim
	}
	return sims
}

// routeWant is what a routed request is asserted on.
type routeWant struct {
	Outcome     xdstest.Outcome
	Listener    string
	RouteConfig string
	VirtualHost string
	Cluster     string
	HashPolicy  []string
	Tunnel      string
	Endpoints   []xdstest.Endpoint
}

type routeCase struct {
	name  string
	proxy string
	req   xdstest.Request
	want  routeWant
}

func runRouteCases(t *testing.T, sims map[string]*xdstest.Simulation, cases []routeCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sim := sims[tc.proxy]
			if sim == nil {
				t.Fatalf("no TestProxy %q", tc.proxy)
			}
			r := sim.Route(tc.req)
			got := routeWant{r.Outcome, r.Listener, r.RouteConfig, r.VirtualHost, r.Cluster, r.HashPolicy, r.Tunnel, sortedEndpoints(r.Endpoints)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s\nsimulation: %s", diff, r.Detail)
			}
		})
	}
}

// sortedEndpoints orders endpoints by address, so that tables need not
// repeat the load assignment's order.
func sortedEndpoints(eps []xdstest.Endpoint) []xdstest.Endpoint {
	eps = slices.Clone(eps)
	slices.SortFunc(eps, func(a, b xdstest.Endpoint) int { return strings.Compare(a.Address, b.Address) })
	return eps
}

// clusterWant is what a cluster resolved by name is asserted on.
type clusterWant struct {
	Outcome   xdstest.Outcome
	Type      string
	LbPolicy  string
	Endpoints []xdstest.Endpoint
}

type clusterCase struct {
	proxy, cluster string
	want           clusterWant
}

func runClusterCases(t *testing.T, sims map[string]*xdstest.Simulation, cases []clusterCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.proxy+"/"+tc.cluster, func(t *testing.T) {
			up, outcome, detail := sims[tc.proxy].Cluster(tc.cluster, xdstest.Request{})
			got := clusterWant{outcome, up.Type, up.LbPolicy, sortedEndpoints(up.Endpoints)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s\nsimulation: %s", diff, detail)
			}
		})
	}
}

func ep(addr string) xdstest.Endpoint { return xdstest.Endpoint{Address: addr} }

// TestSimulationDestinationRules: what each DestinationRule field that
// changes routing does to a sidecar's request. Sidecar requests enter
// virtualOutbound (15001), which hands them to the listener of their
// original destination: "<cluster IP>_<port>" for TCP, "0.0.0.0_<port>"
// (routes by Host) for HTTP, else its own catch-all to PassthroughCluster.
func TestSimulationDestinationRules(t *testing.T) {
	sims := simulations(t, "destinationrules")
	const (
		web     = "outbound|80||web.app.svc.cluster.local"
		webVh   = "web.app.svc.cluster.local:80"
		webFQDN = "web.app.svc.cluster.local"
	)
	webEndpoints := []xdstest.Endpoint{ep("10.1.0.1:8080"), ep("10.1.0.2:8080")}
	runRouteCases(t, sims, []routeCase{
		{"consistentHash header: hash policy on the route", "client",
			xdstest.Request{DestinationIP: "10.96.0.20", Port: 80, Host: webFQDN, Path: "/"},
			routeWant{xdstest.OutcomeRouted, "0.0.0.0_80", "80", webVh, web, []string{"header:x-user"}, "", webEndpoints}},
		{"short name in the service's namespace", "client",
			xdstest.Request{DestinationIP: "10.96.0.20", Port: 80, Host: "web", Path: "/a"},
			routeWant{xdstest.OutcomeRouted, "0.0.0.0_80", "80", webVh, web, []string{"header:x-user"}, "", webEndpoints}},
		{"name.namespace with port", "client",
			xdstest.Request{DestinationIP: "10.96.0.20", Port: 80, Host: "web.app:80", Path: "/"},
			routeWant{xdstest.OutcomeRouted, "0.0.0.0_80", "80", webVh, web, []string{"header:x-user"}, "", webEndpoints}},
		{"the Host's port takes no part in the match, as in Istio", "client",
			xdstest.Request{DestinationIP: "10.96.0.20", Port: 80, Host: "web:8443", Path: "/"},
			routeWant{xdstest.OutcomeRouted, "0.0.0.0_80", "80", webVh, web, []string{"header:x-user"}, "", webEndpoints}},
		{"cluster IP as Host", "client",
			xdstest.Request{DestinationIP: "10.96.0.20", Port: 80, Host: "10.96.0.20", Path: "/"},
			routeWant{xdstest.OutcomeRouted, "0.0.0.0_80", "80", webVh, web, []string{"header:x-user"}, "", webEndpoints}},
		// Istio looks up the root namespace's private rule first for a
		// proxy in the root namespace.
		{"root namespace proxy: its private rule wins", "root-client",
			xdstest.Request{DestinationIP: "10.96.0.20", Port: 80, Host: webFQDN, Path: "/"},
			routeWant{xdstest.OutcomeRouted, "0.0.0.0_80", "80", webVh, web, []string{"header:x-root"}, "", webEndpoints}},
		{"another namespace: the service namespace's exported rule", "other-client",
			xdstest.Request{DestinationIP: "10.96.0.20", Port: 80, Host: "web.app", Path: "/"},
			routeWant{xdstest.OutcomeRouted, "0.0.0.0_80", "80", webVh, web, []string{"header:x-user"}, "", webEndpoints}},
		{"short name from another namespace is unknown: passthrough", "root-client",
			xdstest.Request{DestinationIP: "10.96.0.20", Port: 80, Host: "web", Path: "/"},
			routeWant{xdstest.OutcomeRouted, "0.0.0.0_80", "80", "allow_any", PassthroughCluster, nil, "", []xdstest.Endpoint{ep("10.96.0.20:80")}}},
		{"unknown host: allow_any to the original destination", "client",
			xdstest.Request{DestinationIP: "10.96.0.20", Port: 80, Host: "example.org", Path: "/"},
			routeWant{xdstest.OutcomeRouted, "0.0.0.0_80", "80", "allow_any", PassthroughCluster, nil, "", []xdstest.Endpoint{ep("10.96.0.20:80")}}},
		{"consistentHash cookie", "client",
			xdstest.Request{DestinationIP: "10.96.0.23", Port: 80, Host: "cart.app.svc.cluster.local", Path: "/"},
			routeWant{xdstest.OutcomeRouted, "0.0.0.0_80", "80", "cart.app.svc.cluster.local:80", "outbound|80||cart.app.svc.cluster.local",
				[]string{"cookie:session"}, "", []xdstest.Endpoint{ep("10.1.2.1:8080")}}},
		{"portLevelSettings consistentHash useSourceIp", "client",
			xdstest.Request{DestinationIP: "10.96.0.23", Port: 8080, Host: "cart:8080", Path: "/"},
			routeWant{xdstest.OutcomeRouted, "0.0.0.0_8080", "8080", "cart.app.svc.cluster.local:8080", "outbound|8080||cart.app.svc.cluster.local",
				[]string{"source_ip"}, "", []xdstest.Endpoint{ep("10.1.2.1:9090")}}},
		{"consistentHash query parameter", "client",
			xdstest.Request{DestinationIP: "10.96.0.24", Port: 80, Host: "search.app.svc.cluster.local", Path: "/?q=shoes"},
			routeWant{xdstest.OutcomeRouted, "0.0.0.0_80", "80", "search.app.svc.cluster.local:80", "outbound|80||search.app.svc.cluster.local",
				[]string{"query_parameter:q"}, "", []xdstest.Endpoint{ep("10.1.3.1:8080")}}},
		{"loadBalancer PASSTHROUGH: the original destination, not the endpoints", "client",
			xdstest.Request{DestinationIP: "10.96.0.21", Port: 80, Host: "pass.app.svc.cluster.local", Path: "/"},
			routeWant{xdstest.OutcomeRouted, "0.0.0.0_80", "80", "pass.app.svc.cluster.local:80", "outbound|80||pass.app.svc.cluster.local",
				nil, "", []xdstest.Endpoint{ep("10.96.0.21:80")}}},
		{"tunnel: tcp_proxy CONNECTs to targetHost:targetPort through the service", "client",
			xdstest.Request{DestinationIP: "10.96.0.22", Port: 5432},
			routeWant{xdstest.OutcomeRouted, "10.96.0.22_5432", "", "", "outbound|5432||db.app.svc.cluster.local",
				nil, "db.internal.example.com:5432", []xdstest.Endpoint{ep("10.1.1.1:5432")}}},
		{"TCP to an address no service has: passthrough", "client",
			xdstest.Request{DestinationIP: "10.50.0.1", Port: 5432},
			routeWant{xdstest.OutcomeRouted, VirtualOutboundListener, "", "", PassthroughCluster, nil, "", []xdstest.Endpoint{ep("10.50.0.1:5432")}}},
		{"to the capture port itself: black hole", "client",
			xdstest.Request{DestinationIP: "10.50.0.1", Port: VirtualOutboundPort},
			routeWant{xdstest.OutcomeNoHealthyUpstream, VirtualOutboundListener, "", "", BlackHoleCluster, nil, "", nil}},
	})
	// This fixture has no VirtualService, so no route selects a subset; a
	// subset's cluster must still hold exactly its labels' endpoints, with
	// its own policy.
	runClusterCases(t, sims, []clusterCase{
		{"client", web, clusterWant{xdstest.OutcomeRouted, "EDS", "RING_HASH", webEndpoints}},
		{"client", "outbound|80|v1|web.app.svc.cluster.local",
			clusterWant{xdstest.OutcomeRouted, "EDS", "RING_HASH", []xdstest.Endpoint{ep("10.1.0.1:8080")}}},
		// Istio's MergeTrafficPolicy: the port-level entry's unset load
		// balancer resets the subset's RANDOM to the default, LEAST_REQUEST.
		{"client", "outbound|80|v2|web.app.svc.cluster.local",
			clusterWant{xdstest.OutcomeRouted, "EDS", "LEAST_REQUEST", []xdstest.Endpoint{ep("10.1.0.2:8080")}}},
		{"other-client", "outbound|80|v1|web.app.svc.cluster.local",
			clusterWant{xdstest.OutcomeRouted, "EDS", "RING_HASH", []xdstest.Endpoint{ep("10.1.0.1:8080")}}},
		// The root-namespace proxy's rule defines no subsets.
		{"root-client", "outbound|80|v1|web.app.svc.cluster.local", clusterWant{Outcome: xdstest.OutcomeNoCluster}},
	})
}

// TestSimulationVirtualServices: where a VirtualService's routes send a
// sidecar's request, by Istio's rules: the first route whose match holds
// wins; a route picks a DestinationRule subset, whose cluster holds only
// that subset's endpoints; sourceLabels match the calling proxy's labels;
// a namespace's private VirtualService beats the public one.
func TestSimulationVirtualServices(t *testing.T) {
	sims := simulations(t, "virtualservices")
	const (
		host  = "web.app.svc.cluster.local"
		vh    = host + ":80"
		v1    = "outbound|80|v1|" + host
		v2    = "outbound|80|v2|" + host
		label = "0.0.0.0_80"
	)
	v1Endpoints := []xdstest.Endpoint{ep("10.1.0.1:8080")}
	v2Endpoints := []xdstest.Endpoint{ep("10.1.0.2:8080")}
	req := func(path string, headers map[string]string) xdstest.Request {
		return xdstest.Request{DestinationIP: "10.96.0.20", Port: 80, Host: host, Path: path, Headers: headers}
	}
	runRouteCases(t, sims, []routeCase{
		{"no match but the last: the default route to v1", "client", req("/", nil),
			routeWant{xdstest.OutcomeRouted, label, "80", vh, v1, nil, "", v1Endpoints}},
		{"header match to v2", "client", req("/", map[string]string{"x-canary": "yes"}),
			routeWant{xdstest.OutcomeRouted, label, "80", vh, v2, nil, "", v2Endpoints}},
		{"header with another value: the default route", "client", req("/", map[string]string{"x-canary": "no"}),
			routeWant{xdstest.OutcomeRouted, label, "80", vh, v1, nil, "", v1Endpoints}},
		{"the caller's labels select v2", "canary-client", req("/", nil),
			routeWant{xdstest.OutcomeRouted, label, "80", vh, v2, nil, "", v2Endpoints}},
		{"a namespace's private VirtualService wins", "other-client", req("/", map[string]string{"x-canary": "no"}),
			routeWant{xdstest.OutcomeRouted, label, "80", vh, v2, nil, "", v2Endpoints}},
	})
	t.Run("weighted split", func(t *testing.T) {
		r := sims["client"].Route(req("/split/a", nil))
		want := []xdstest.WeightedCluster{{Name: v1, Weight: 80}, {Name: v2, Weight: 20}}
		if r.Outcome != xdstest.OutcomeWeighted || !cmp.Equal(r.Weighted, want) {
			t.Errorf("outcome %s, weighted %v; want %s, %v\nsimulation: %s", r.Outcome, r.Weighted, xdstest.OutcomeWeighted, want, r.Detail)
		}
	})
}
