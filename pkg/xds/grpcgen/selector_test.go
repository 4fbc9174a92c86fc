package grpcgen

import (
	"slices"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// selectorMesh has a plain rule for echo (subset v1, plaintext) and a rule
// whose workloadSelector picks the Pods labelled app=client: mutual TLS, a
// ring hash on a header, and a subset v2 of its own.
const selectorMesh = `
proxy: {namespace: default, ip: 10.0.0.1}
services:
- name: echo
  namespace: default
  ports:
  - {name: grpc, port: 7070}
endpoints:
- {service: default/echo, portName: grpc, port: 7070, addresses: [10.1.0.1], labels: {version: v1}}
- {service: default/echo, portName: grpc, port: 7070, addresses: [10.1.0.2], labels: {version: v2}}
destinationRules:
- metadata: {name: echo, namespace: default}
  spec:
    host: echo.default.svc.cluster.local
    subsets:
    - {name: v1, labels: {version: v1}}
- metadata: {name: echo-client, namespace: default}
  spec:
    host: echo.default.svc.cluster.local
    workloadSelector: {matchLabels: {app: client}}
    trafficPolicy:
      tls: {mode: ISTIO_MUTUAL}
      loadBalancer: {consistentHash: {httpHeaderName: x-user}}
    subsets:
    - {name: v2, labels: {version: v2}}
`

// TestWorkloadSelectorRules checks that a gRPC client resolves the
// DestinationRule a workloadSelector picks it for, as an Envoy sidecar
// does: its TLS, load balancer, hash policy and subsets, layered over the
// namespace's plain rule. A client the selector does not pick, in the same
// namespace and served by the same generators (and caches), keeps the
// plain rule. Before, every gRPC client got the plain rule: a rule asking
// for mutual TLS was silently not applied, and a subset only the selector
// rule defined was never served, so calls routed to it failed.
func TestWorkloadSelectorRules(t *testing.T) {
	var f fixture
	if err := yaml.UnmarshalStrict([]byte(selectorMesh), &f); err != nil {
		t.Fatal(err)
	}
	push := pushcontext.Build(f.store(t), testPushOptions(), nil, nil)
	set := New(Options{})
	const (
		plain  = "outbound|7070||echo.default.svc.cluster.local"
		v1, v2 = "outbound|7070|v1|echo.default.svc.cluster.local", "outbound|7070|v2|echo.default.svc.cluster.local"
	)
	tests := []struct {
		name      string
		labels    map[string]string
		clusters  []string // served, of plain, v1 and v2, sorted
		mtls      bool
		lb        cluster.Cluster_LbPolicy
		hashed    bool
		endpoints map[string][]string // addresses by load assignment
	}{
		{
			name: "selected", labels: map[string]string{"app": "client"},
			clusters: []string{plain, v1, v2}, mtls: true, lb: cluster.Cluster_RING_HASH, hashed: true,
			endpoints: map[string][]string{plain: {"10.1.0.1", "10.1.0.2"}, v1: {"10.1.0.1"}, v2: {"10.1.0.2"}},
		},
		{
			name: "not selected", labels: map[string]string{"app": "other"},
			clusters: []string{plain, v1}, lb: cluster.Cluster_ROUND_ROBIN,
			endpoints: map[string][]string{plain: {"10.1.0.1", "10.1.0.2"}, v1: {"10.1.0.1"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.Proxy.Labels = tt.labels
			proxy := f.proxy()
			names := []string{plain, v1, v2}
			clusters := generate(t, set.Clusters, proxy, push, ClusterType, names)
			var got []string
			for _, res := range clusters {
				got = append(got, res.Name)
				c := &cluster.Cluster{}
				if err := res.Resource.UnmarshalTo(c); err != nil {
					t.Fatal(err)
				}
				if hasTLS := c.GetTransportSocket() != nil; hasTLS != tt.mtls {
					t.Errorf("%s: mutual TLS %v, want %v", res.Name, hasTLS, tt.mtls)
				}
				if c.GetLbPolicy() != tt.lb {
					t.Errorf("%s: lb policy %v, want %v", res.Name, c.GetLbPolicy(), tt.lb)
				}
			}
			if !slices.Equal(got, slices.Sorted(slices.Values(tt.clusters))) {
				t.Errorf("clusters %v, want %v", got, tt.clusters)
			}

			gotEndpoints := map[string][]string{}
			for _, res := range generate(t, set.Endpoints, proxy, push, EndpointType, names) {
				cla := &endpoint.ClusterLoadAssignment{}
				if err := res.Resource.UnmarshalTo(cla); err != nil {
					t.Fatal(err)
				}
				for _, group := range cla.GetEndpoints() {
					for _, lbe := range group.GetLbEndpoints() {
						gotEndpoints[res.Name] = append(gotEndpoints[res.Name], lbe.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
					}
				}
			}
			for name, want := range tt.endpoints {
				if !slices.Equal(gotEndpoints[name], want) {
					t.Errorf("EDS %s: %v, want %v", name, gotEndpoints[name], want)
				}
			}
			if len(gotEndpoints) != len(tt.endpoints) {
				t.Errorf("EDS served %d load assignments, want %d", len(gotEndpoints), len(tt.endpoints))
			}

			routes := generate(t, set.Routes, proxy, push, RouteType, []string{"echo.default.svc.cluster.local:7070"})
			if len(routes) != 1 {
				t.Fatalf("RDS: %d route configurations", len(routes))
			}
			rc := &route.RouteConfiguration{}
			if err := routes[0].Resource.UnmarshalTo(rc); err != nil {
				t.Fatal(err)
			}
			hash := rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetHashPolicy()
			if hashed := len(hash) == 1 && hash[0].GetHeader().GetHeaderName() == "x-user"; hashed != tt.hashed {
				t.Errorf("route hash policy %v, want hashing by x-user: %v", hash, tt.hashed)
			}
		})
	}
}

// generate asks gen for names, sorted as the server hands them over, and
// checks what it returns as every generator test does.
func generate(t *testing.T, gen Generator, proxy *model.Proxy, push *pushcontext.PushContext, typeURL string, names []string) model.Resources {
	t.Helper()
	names = slices.Sorted(slices.Values(names))
	w := &model.WatchedResource{TypeURL: typeURL, ResourceNames: names}
	res, err := gen.Generate(proxy, push, w, &model.PushRequest{Full: true})
	if err != nil {
		t.Fatalf("%s: %v", typeURL, err)
	}
	checkResources(t, typeURL, w, res)
	return res
}
