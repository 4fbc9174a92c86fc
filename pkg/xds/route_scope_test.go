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

// TestHashPolicyOfAnInvisibleDestinationReachesRoutes: a VirtualService for
// a service a proxy sees may route to one it does not see (exported to its
// own namespace only). The route still carries the consistent hash of the
// destination's DestinationRule, so a change of that hash must push routes
// to the proxy although it cannot see the rule's host.
func TestHashPolicyOfAnInvisibleDestinationReachesRoutes(t *testing.T) {
	xHost := "x.other." + domain
	for _, tc := range []struct {
		name, generator, route string
	}{
		{"envoy", "", "80"},
		{"proxyless gRPC", "grpc", xHost + ":80"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gens := stampedGenerators()
			if tc.generator == "grpc" {
				for typeURL, g := range grpcgen.New(grpcgen.Options{DomainSuffix: "cluster.local"}).ByTypeURL() {
					gens[typeURL] = g
				}
			} else {
				for typeURL, g := range envoygen.New(envoygen.Options{DomainSuffix: "cluster.local"}).ByTypeURL() {
					gens[typeURL] = g
				}
			}
			h := newHarness(t, harnessConfig{noStoreHandler: true, generators: gens, seed: func(s model.Store) {
				upsertService(s, "a", model.ExportTo{"."}, nil)
				s.UpsertService(&model.Service{Name: "x", Namespace: "other", Hostname: xHost,
					Ports: []*model.Port{{Name: "http", Port: 80, Protocol: model.ProtocolHTTP, TargetPort: 8080}}})
				s.UpsertConfig(&model.Config{Kind: model.KindVirtualService, Namespace: "other", Name: "x", CreationTime: ruleCreated,
					Spec: &networking.VirtualService{Hosts: []string{xHost}, Http: []*networking.HTTPRoute{{
						Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: hostname("a")}}},
					}}}})
			}})
			meta, err := structpb.NewStruct(map[string]any{"NAMESPACE": "other", "GENERATOR": tc.generator})
			if err != nil {
				t.Fatal(err)
			}
			node := &corev3.Node{Id: "sidecar~10.0.0.5~client.other~other.svc.cluster.local", Metadata: meta}
			c := h.sotwAs("client", node)
			rds := c.subscribe(RouteType, tc.route)
			if hashed(t, rds, tc.route) {
				t.Fatal("the route hashes before any rule asks it to")
			}
			c.ack(rds, tc.route)
			c.expectQuiet("after the ACK")

			upsertRule(h.store, "a", hostname("a"), &networking.DestinationRule{TrafficPolicy: &networking.TrafficPolicy{
				LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_ConsistentHash{
					ConsistentHash: &networking.LoadBalancerSettings_ConsistentHashLB{
						HashKey: &networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName{HttpHeaderName: "x-user"}}}}}})
			h.pushNow(model.NewPushRequest(ruleKey("a"), time.Now()))
			var got bool
			for _, r := range c.barrier() {
				if r.GetTypeUrl() == RouteType {
					got = hashed(t, r, tc.route)
				}
			}
			// What a proxy connecting now is served: the fixture is right.
			if !hashed(t, h.sotwAs("fresh", node).subscribe(RouteType, tc.route), tc.route) {
				t.Fatal("a new connection's route does not hash: the fixture proves nothing")
			}
			if !got {
				t.Fatal("the destination's rule now hashes by x-user, but the proxy's route was not pushed with it")
			}
		})
	}
}

// hashed reports whether the route configuration name in r hashes requests
// anywhere.
func hashed(t *testing.T, r interface {
	GetResources() []*anypb.Any
}, name string) bool {
	t.Helper()
	for _, a := range r.GetResources() {
		var rc routev3.RouteConfiguration
		if err := a.UnmarshalTo(&rc); err != nil {
			t.Fatal(err)
		}
		if rc.GetName() != name {
			continue
		}
		for _, vh := range rc.GetVirtualHosts() {
			for _, rt := range vh.GetRoutes() {
				if len(rt.GetRoute().GetHashPolicy()) > 0 {
					return true
				}
			}
		}
		return false
	}
	t.Fatalf("no route configuration %s in %v", name, strings.Join(names(r.GetResources(), resourceName), ","))
	return false
}
