package loadassign

import (
	"fmt"
	"slices"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

const hostA, hostB = "a.default.svc.cluster.local", "b.default.svc.cluster.local"

var pushOptions = pushcontext.Options{DomainSuffix: "cluster.local", RootNamespace: "istio-system"}

// cacheWorld is a store with services a and b (port 7070), whose endpoints
// carry a version label, and a push context built from it.
func cacheWorld(t *testing.T) (model.Store, *pushcontext.PushContext) {
	t.Helper()
	store := model.NewStore()
	for i, name := range []string{"a", "b"} {
		store.UpsertService(&model.Service{Name: name, Namespace: "default", Hostname: name + ".default.svc.cluster.local",
			Ports: []*model.Port{{Name: "grpc", Port: 7070}}})
		store.SetEndpoints(model.NamespacedName{Namespace: "default", Name: name}, "s", []*model.Endpoint{
			{Address: fmt.Sprintf("10.0.%d.1", i+1), Port: 7070, ServicePortName: "grpc", Labels: map[string]string{"version": "v1"}},
			{Address: fmt.Sprintf("10.0.%d.2", i+1), Port: 7070, ServicePortName: "grpc", Labels: map[string]string{"version": "v2"}},
		})
	}
	return store, pushcontext.Build(store, pushOptions, nil, nil)
}

func get(t *testing.T, c *Cache, push *pushcontext.PushContext, cluster Cluster, labels map[string]string) model.Resource {
	t.Helper()
	res, err := c.Get(push, cluster, labels)
	if err != nil {
		t.Fatal(err)
	}
	if res.Name != cluster.Name() {
		t.Errorf("resource named %q, want %q", res.Name, cluster.Name())
	}
	return res
}

func addresses(t *testing.T, r model.Resource) []string {
	t.Helper()
	var cla endpoint.ClusterLoadAssignment
	if err := proto.Unmarshal(r.Resource.GetValue(), &cla); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range cla.GetEndpoints() {
		for _, lb := range g.GetLbEndpoints() {
			out = append(out, lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		}
	}
	return out
}

// TestCacheSharesUntilEndpointsChange follows an endpoint-only update: the
// push context swaps one service's list in place (same version), so only
// that service's assignment is built again.
func TestCacheSharesUntilEndpointsChange(t *testing.T) {
	store, push := cacheWorld(t)
	var c Cache
	a, b := Cluster{Host: hostA, Port: 7070}, Cluster{Host: hostB, Port: 7070}
	firstA, firstB := get(t, &c, push, a, nil), get(t, &c, push, b, nil)
	if again := get(t, &c, push, a, nil); again.Resource != firstA.Resource {
		t.Errorf("an unchanged endpoint list was marshalled again")
	}

	store.SetEndpoints(model.NamespacedName{Namespace: "default", Name: "a"}, "s",
		[]*model.Endpoint{{Address: "10.0.9.9", Port: 7070, ServicePortName: "grpc"}})
	if changed := push.UpdateEndpoints(store, []model.NamespacedName{{Namespace: "default", Name: "a"}}).Hosts; len(changed) != 1 {
		t.Fatalf("UpdateEndpoints changed %v", changed)
	}
	if got := addresses(t, get(t, &c, push, a, nil)); !slices.Equal(got, []string{"10.0.9.9"}) {
		t.Errorf("after the update a has %v, want [10.0.9.9]", got)
	}
	if got := get(t, &c, push, b, nil); got.Resource != firstB.Resource {
		t.Errorf("b's unchanged assignment was not reused")
	}
}

// TestCacheSubsetLabels checks that one cluster resolved with different
// subset labels (namespaces whose rules define the subset differently)
// gets each its own endpoints, and that both stay cached.
func TestCacheSubsetLabels(t *testing.T) {
	_, push := cacheWorld(t)
	var c Cache
	subset := Cluster{Host: hostA, Port: 7070, Subset: "s"}
	v1 := get(t, &c, push, subset, map[string]string{"version": "v1"})
	v2 := get(t, &c, push, subset, map[string]string{"version": "v2"})
	if got := addresses(t, v1); !slices.Equal(got, []string{"10.0.1.1"}) {
		t.Errorf("v1 labels: %v", got)
	}
	if got := addresses(t, v2); !slices.Equal(got, []string{"10.0.1.2"}) {
		t.Errorf("v2 labels: %v", got)
	}
	if again := get(t, &c, push, subset, map[string]string{"version": "v1"}); again.Resource != v1.Resource {
		t.Errorf("the first variant was evicted by the second")
	}
}

// TestCacheIndependentSnapshots guards the cache against snapshots that are
// not built from one another (their endpoint versions may repeat): each
// must get its own endpoints.
func TestCacheIndependentSnapshots(t *testing.T) {
	var c Cache
	cluster := Cluster{Host: hostA, Port: 7070}
	for _, addr := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.1"} {
		store := model.NewStore()
		store.UpsertService(&model.Service{Name: "a", Namespace: "default", Hostname: hostA,
			Ports: []*model.Port{{Name: "grpc", Port: 7070}}})
		store.SetEndpoints(model.NamespacedName{Namespace: "default", Name: "a"}, "s",
			[]*model.Endpoint{{Address: addr, Port: 7070, ServicePortName: "grpc"}})
		push := pushcontext.Build(store, pushOptions, nil, nil)
		if got := addresses(t, get(t, &c, push, cluster, nil)); !slices.Equal(got, []string{addr}) {
			t.Errorf("addresses %v, want [%s]", got, addr)
		}
	}
}

func TestClusterName(t *testing.T) {
	tests := []struct {
		cluster Cluster
		want    string
	}{
		{Cluster{Host: hostA, Port: 7070}, "outbound|7070||a.default.svc.cluster.local"},
		{Cluster{Host: hostA, Port: 80, Subset: "v1"}, "outbound|80|v1|a.default.svc.cluster.local"},
	}
	for _, tt := range tests {
		if got := tt.cluster.Name(); got != tt.want {
			t.Errorf("%+v.Name() = %q, want %q", tt.cluster, got, tt.want)
		}
	}
}
