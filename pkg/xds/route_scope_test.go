package xds

import (
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/xds/envoygen"
	"github.com/meshpilot/meshpilot/pkg/xds/grpcgen"
)

// TestRoutesFollowAnInvisibleDestination: a VirtualService for a service a
// proxy sees (x) may route to one it does not see (a, exported to its own
// namespace only). The route still names a's cluster, by the port a has
// when the destination gives none, and carries the consistent hash of a's
// DestinationRule. So a change of either must push routes to the proxy,
// although it cannot see a.
func TestRoutesFollowAnInvisibleDestination(t *testing.T) {
	xHost := "x.other." + domain
	port := func(n uint32) *model.Port {
		return &model.Port{Name: "http-" + formatUint(uint64(n)), Port: n, Protocol: model.ProtocolHTTP, TargetPort: 8080}
	}
	upsertA := func(s model.Store, ports ...*model.Port) {
		s.UpsertService(&model.Service{Name: "a", Namespace: "default", Hostname: hostname("a"),
			ExportTo: model.ExportTo{"."}, Ports: ports})
	}
	changes := []struct {
		name   string
		change func(model.Store) model.ConfigKey
		// applied reports whether a route configuration shows the change.
		applied func(*routev3.Route) bool
	}{
		{
			name: "rule's consistent hash",
			change: func(s model.Store) model.ConfigKey {
				upsertRule(s, "a", hostname("a"), &networking.DestinationRule{TrafficPolicy: &networking.TrafficPolicy{
					LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_ConsistentHash{
						ConsistentHash: &networking.LoadBalancerSettings_ConsistentHashLB{
							HashKey: &networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName{HttpHeaderName: "x-user"}}}}}})
				return ruleKey("a")
			},
			applied: func(r *routev3.Route) bool { return len(r.GetRoute().GetHashPolicy()) > 0 },
		},
		{
			// With one port, a portless destination is that port; with
			// two, it is the port being routed (80).
			name: "service's ports",
			change: func(s model.Store) model.ConfigKey {
				upsertA(s, port(80), port(9000))
				return model.ConfigKey{Kind: model.KindService, Namespace: "default", Name: "a"}
			},
			applied: func(r *routev3.Route) bool {
				return r.GetRoute().GetCluster() == "outbound|80||"+hostname("a")
			},
		},
	}
	clients := []struct{ name, generator, route string }{
		{"envoy", "", "80"},
		{"proxyless gRPC", "grpc", xHost + ":80"},
	}
	for _, tc := range changes {
		for _, client := range clients {
			t.Run(tc.name+"/"+client.name, func(t *testing.T) {
				gens := stampedGenerators()
				if client.generator == "grpc" {
					for typeURL, g := range grpcgen.New(grpcgen.Options{DomainSuffix: "cluster.local"}).ByTypeURL() {
						gens[typeURL] = g
					}
				} else {
					for typeURL, g := range envoygen.New(envoygen.Options{DomainSuffix: "cluster.local"}).ByTypeURL() {
						gens[typeURL] = g
					}
				}
				h := newHarness(t, harnessConfig{noStoreHandler: true, generators: gens, seed: func(s model.Store) {
					upsertA(s, port(9000))
					s.UpsertService(&model.Service{Name: "x", Namespace: "other", Hostname: xHost, Ports: []*model.Port{port(80)}})
					s.UpsertConfig(&model.Config{Kind: model.KindVirtualService, Namespace: "other", Name: "x", CreationTime: ruleCreated,
						Spec: &networking.VirtualService{Hosts: []string{xHost}, Http: []*networking.HTTPRoute{{
							Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: hostname("a")}}},
						}}}})
				}})
				meta, err := structpb.NewStruct(map[string]any{"NAMESPACE": "other", "GENERATOR": client.generator})
				if err != nil {
					t.Fatal(err)
				}
				node := &corev3.Node{Id: "sidecar~10.0.0.5~client.other~other.svc.cluster.local", Metadata: meta}
				c := h.sotwAs("client", node)
				rds := c.subscribe(RouteType, client.route)
				if tc.applied(routeToX(t, rds.GetResources(), client.route, xHost)) {
					t.Fatal("the route shows the change before it is made")
				}
				c.ack(rds, client.route)
				c.expectQuiet("after the ACK")

				key := tc.change(h.store)
				h.pushNow(model.NewPushRequest(key, time.Now()))
				pushed := false
				for _, r := range c.barrier() {
					if r.GetTypeUrl() == RouteType {
						pushed = tc.applied(routeToX(t, r.GetResources(), client.route, xHost))
					}
				}
				// What a proxy connecting now is served: the fixture is right.
				fresh := h.sotwAs("fresh", node).subscribe(RouteType, client.route)
				if !tc.applied(routeToX(t, fresh.GetResources(), client.route, xHost)) {
					t.Fatal("a new connection's route does not show the change: the fixture proves nothing")
				}
				if !pushed {
					t.Fatal("the proxy was not pushed the route that a new connection gets")
				}
			})
		}
	}
}

// routeToX is the route of x's virtual host in route configuration name.
func routeToX(t *testing.T, resources []*anypb.Any, name, xHost string) *routev3.Route {
	t.Helper()
	for _, a := range resources {
		var rc routev3.RouteConfiguration
		if err := a.UnmarshalTo(&rc); err != nil {
			t.Fatal(err)
		}
		if rc.GetName() != name {
			continue
		}
		for _, vh := range rc.GetVirtualHosts() {
			for _, d := range vh.GetDomains() {
				if d == xHost && len(vh.GetRoutes()) == 1 {
					return vh.GetRoutes()[0]
				}
			}
		}
		t.Fatalf("route configuration %s has no single route for %s", name, xHost)
	}
	t.Fatalf("no route configuration %s in %v", name, strings.Join(names(resources, resourceName), ","))
	return nil
}
