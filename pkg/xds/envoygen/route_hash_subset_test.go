package envoygen

import (
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// TestRouteHashFollowsSubsetPolicy checks that a VirtualService route to a
// subset hashes requests by the consistentHash of the policy resolved for
// that subset, as the subset's ring-hash cluster is built from, and as
// Istio does (hashForHTTPDestination). The top-level policy alone left a
// subset's own consistentHash without a hash policy: Envoy's ring hash then
// spreads requests as if at random, and the stickiness is silently lost.
func TestRouteHashFollowsSubsetPolicy(t *testing.T) {
	const world = `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: app}
spec:
  clusterIP: 10.96.0.1
  ports: [{name: http, port: 80}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web, namespace: app}
spec:
  host: web.app.svc.cluster.local
  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}
  subsets:
  - {name: v1, labels: {version: v1}}
  - name: v2
    labels: {version: v2}
    trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-v2-user}}}
  - name: rr
    labels: {version: v3}
    trafficPolicy: {loadBalancer: {simple: ROUND_ROBIN}}
`
	tests := []struct {
		subset   string
		hashedBy string // "" for no hash policy
	}{
		{"v1", "x-user"},
		{"v2", "x-v2-user"},
		{"rr", ""},
	}
	for _, tt := range tests {
		t.Run(tt.subset, func(t *testing.T) {
			vs := `
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web, namespace: app}
spec:
  hosts: [web]
  http:
  - route: [{destination: {host: web, subset: ` + tt.subset + `}}]
`
			push := pushcontext.Build(xdstest.Store(t, world+vs), testPushOptions(), nil, nil)
			w := &model.WatchedResource{TypeURL: RouteType, ResourceNames: []string{"80"}}
			got := lrGenerate(t, NewRouteGenerator(Options{}), lrSidecar("app", "10.1.0.1", nil), push, w)["80"]
			rc := &route.RouteConfiguration{}
			if err := got.Resource.UnmarshalTo(rc); err != nil {
				t.Fatal(err)
			}
			var action *route.RouteAction
			for _, vh := range rc.GetVirtualHosts() {
				if vh.GetName() == "web.app.svc.cluster.local:80" {
					action = vh.GetRoutes()[0].GetRoute()
				}
			}
			if want := "outbound|80|" + tt.subset + "|web.app.svc.cluster.local"; action.GetCluster() != want {
				t.Fatalf("route goes to %q, want %q", action.GetCluster(), want)
			}
			var hashedBy string
			if hp := action.GetHashPolicy(); len(hp) > 0 {
				hashedBy = hp[0].GetHeader().GetHeaderName()
			}
			if hashedBy != tt.hashedBy {
				t.Errorf("route hashes by header %q, want %q", hashedBy, tt.hashedBy)
			}
		})
	}
}
