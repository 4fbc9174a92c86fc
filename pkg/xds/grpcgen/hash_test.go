package grpcgen

import (
	"fmt"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// TestRouteHashFollowsSubsetPolicy routes every call to one subset and
// checks that the route hashes requests exactly when that subset's cluster
// is a ring hash: the hash key comes from the policy resolved for the port
// and subset, as the cluster's load balancer does (and as Istio does). A
// subset whose own policy asked for consistent hashing got a ring-hash
// cluster but a route without a hash policy, so grpc-go gave every request
// a random hash and the stickiness the rule asked for was silently lost.
func TestRouteHashFollowsSubsetPolicy(t *testing.T) {
	const mesh = `
proxy: {namespace: default, ip: 10.0.0.1}
services:
- {name: echo, namespace: default, ports: [{name: grpc, port: 7070}]}
endpoints:
- {service: default/echo, portName: grpc, port: 7070, addresses: [10.1.0.1], labels: {version: v1}}
- {service: default/echo, portName: grpc, port: 7070, addresses: [10.1.0.2], labels: {version: v2}}
destinationRules:
- metadata: {name: echo, namespace: default}
  spec:
    host: echo.default.svc.cluster.local
    trafficPolicy: %s
    subsets:
    - {name: v1, labels: {version: v1}}
    - name: v2
      labels: {version: v2}
      trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-v2-user}}}
virtualServices:
- metadata: {name: echo, namespace: default}
  spec:
    hosts: [echo]
    http:
    - route: [{destination: {host: echo, subset: %s}}]
`
	tests := []struct {
		name     string
		topLevel string // the rule's top-level trafficPolicy
		subset   string
		ringHash bool
		hashedBy string // the header the route hashes by; "" for none
	}{
		{"subset policy hashes", "{}", "v2", true, "x-v2-user"},
		{"subset policy overrides the top level", "{loadBalancer: {consistentHash: {httpHeaderName: x-user}}}", "v2", true, "x-v2-user"},
		{"top level hashes a subset without a policy", "{loadBalancer: {consistentHash: {httpHeaderName: x-user}}}", "v1", true, "x-user"},
		{"nothing hashes", "{}", "v1", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f fixture
			if err := yaml.UnmarshalStrict([]byte(fmt.Sprintf(mesh, tt.topLevel, tt.subset)), &f); err != nil {
				t.Fatal(err)
			}
			push := pushcontext.Build(f.store(t), testPushOptions(), nil, nil)
			set := New(Options{})
			proxy := f.proxy()

			clusterName := "outbound|7070|" + tt.subset + "|echo.default.svc.cluster.local"
			res := generate(t, set.Clusters, proxy, push, ClusterType, []string{clusterName})
			if len(res) != 1 {
				t.Fatalf("CDS: %d clusters", len(res))
			}
			c := &cluster.Cluster{}
			if err := res[0].Resource.UnmarshalTo(c); err != nil {
				t.Fatal(err)
			}
			if ringHash := c.GetLbPolicy() == cluster.Cluster_RING_HASH; ringHash != tt.ringHash {
				t.Errorf("cluster %s: lb policy %v, want ring hash %v", clusterName, c.GetLbPolicy(), tt.ringHash)
			}

			res = generate(t, set.Routes, proxy, push, RouteType, []string{"echo.default.svc.cluster.local:7070"})
			if len(res) != 1 {
				t.Fatalf("RDS: %d route configurations", len(res))
			}
			rc := &route.RouteConfiguration{}
			if err := res[0].Resource.UnmarshalTo(rc); err != nil {
				t.Fatal(err)
			}
			action := rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute()
			if action.GetCluster() != clusterName {
				t.Fatalf("route goes to %q, want %q", action.GetCluster(), clusterName)
			}
			var hashedBy string
			if hp := action.GetHashPolicy(); len(hp) == 1 {
				hashedBy = hp[0].GetHeader().GetHeaderName()
			} else if len(hp) > 1 {
				t.Fatalf("hash policy %v", hp)
			}
			if hashedBy != tt.hashedBy {
				t.Errorf("route hashes by header %q, want %q", hashedBy, tt.hashedBy)
			}
		})
	}
}
