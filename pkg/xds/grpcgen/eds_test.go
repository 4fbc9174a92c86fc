package grpcgen

import (
	"fmt"
	"slices"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
	"github.com/meshpilot/meshpilot/pkg/xds/loadassign"
)

// edsWorld is a store with services a and b in namespace default, each with
// one port and subsets v1/v2, plus a push context built from it.
type edsWorld struct {
	store model.Store
	push  *pushcontext.PushContext
}

func newEDSWorld(t *testing.T) *edsWorld {
	t.Helper()
	store := model.NewStore()
	for _, name := range []string{"a", "b"} {
		store.UpsertService(&model.Service{
			Name: name, Namespace: "default", Hostname: name + ".default.svc.cluster.local",
			Ports: []*model.Port{{Name: "grpc", Port: 7070, Protocol: model.ProtocolGRPC}},
		})
		store.SetEndpoints(model.NamespacedName{Namespace: "default", Name: name}, "s1", []*model.Endpoint{
			{Address: "10.0.0.1", Port: 7070, ServicePortName: "grpc", Labels: map[string]string{"version": "v1"}},
			{Address: "10.0.0.2", Port: 7070, ServicePortName: "grpc", Labels: map[string]string{"version": "v2"}},
		})
		store.UpsertConfig(&model.Config{
			Kind: model.KindDestinationRule, Name: name, Namespace: "default", CreationTime: time.Unix(1, 0),
			Spec: &networking.DestinationRule{
				Host: name + ".default.svc.cluster.local",
				Subsets: []*networking.Subset{
					{Name: "v1", Labels: map[string]string{"version": "v1"}},
					{Name: "v2", Labels: map[string]string{"version": "v2"}},
				},
			},
		})
	}
	return &edsWorld{store: store, push: pushcontext.Build(store, testPushOptions(), nil, nil)}
}

func edsNames(hosts ...string) []string {
	var names []string
	for _, h := range hosts {
		for _, subset := range []string{"", "v1", "v2"} {
			names = append(names, loadassign.ClusterName(h+".default.svc.cluster.local", 7070, subset))
		}
	}
	slices.Sort(names)
	return names
}

func resourceNames(res model.Resources) []string {
	var names []string
	for _, r := range res {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	return names
}

func endpointsChanged(names ...string) *model.PushRequest {
	req := &model.PushRequest{ConfigsUpdated: map[model.ConfigKey]struct{}{}}
	for _, n := range names {
		req.ConfigsUpdated[model.ConfigKey{Kind: model.KindEndpoints, Namespace: "default", Name: n}] = struct{}{}
	}
	return req
}

func addressesOf(t *testing.T, r model.Resource) []string {
	t.Helper()
	cla := &endpoint.ClusterLoadAssignment{}
	if err := r.Resource.UnmarshalTo(cla); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, group := range cla.GetEndpoints() {
		for _, lbe := range group.GetLbEndpoints() {
			out = append(out, lbe.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		}
	}
	return out
}

func TestEndpointsIncremental(t *testing.T) {
	proxy := &model.Proxy{Namespace: "default"}
	explicit := &model.WatchedResource{TypeURL: EndpointType, ResourceNames: edsNames("a", "b")}
	wildcard := &model.WatchedResource{TypeURL: EndpointType, Wildcard: true}
	tests := []struct {
		name string
		w    *model.WatchedResource
		req  *model.PushRequest
		want []string
	}{
		{"full push returns everything", explicit, &model.PushRequest{Full: true}, edsNames("a", "b")},
		{"nil request returns everything", explicit, nil, edsNames("a", "b")},
		{"endpoint push returns the changed service only", explicit, endpointsChanged("a"), edsNames("a")},
		{"both changed", explicit, endpointsChanged("a", "b"), edsNames("a", "b")},
		{"wildcard endpoint push", wildcard, endpointsChanged("b"), edsNames("b")},
		{"unknown service changed", explicit, endpointsChanged("gone"), nil},
		{"no endpoint keys", explicit, &model.PushRequest{ConfigsUpdated: map[model.ConfigKey]struct{}{
			{Kind: model.KindWorkload, Namespace: "default", Name: "a"}: {},
		}}, nil},
		{"changed service not subscribed", &model.WatchedResource{ResourceNames: edsNames("a")}, endpointsChanged("b"), nil},
	}
	world := newEDSWorld(t)
	gen := NewEndpointGenerator(Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := gen.Generate(proxy, world.push, tt.w, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := resourceNames(res); !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestEndpointsUpdateAfterChange follows the fast path: the store changes,
// the push context swaps one service's endpoints in place, and an
// endpoint-only push must carry the new endpoints while the other service's
// cached assignments stay shared.
func TestEndpointsUpdateAfterChange(t *testing.T) {
	world := newEDSWorld(t)
	gen := NewEndpointGenerator(Options{})
	proxy := &model.Proxy{Namespace: "default"}
	w := &model.WatchedResource{TypeURL: EndpointType, ResourceNames: edsNames("a", "b")}
	before, err := gen.Generate(proxy, world.push, w, &model.PushRequest{Full: true})
	if err != nil {
		t.Fatal(err)
	}

	world.store.SetEndpoints(model.NamespacedName{Namespace: "default", Name: "a"}, "s1", []*model.Endpoint{
		{Address: "10.0.0.9", Port: 7070, ServicePortName: "grpc", Labels: map[string]string{"version": "v1"}},
	})
	if changed := world.push.UpdateEndpoints(world.store, []model.NamespacedName{{Namespace: "default", Name: "a"}}).Hosts; len(changed) != 1 {
		t.Fatalf("UpdateEndpoints changed %v", changed)
	}
	partial, err := gen.Generate(proxy, world.push, w, endpointsChanged("a"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		loadassign.ClusterName("a.default.svc.cluster.local", 7070, ""):   {"10.0.0.9"},
		loadassign.ClusterName("a.default.svc.cluster.local", 7070, "v1"): {"10.0.0.9"},
		loadassign.ClusterName("a.default.svc.cluster.local", 7070, "v2"): nil,
	}
	if len(partial) != len(want) {
		t.Fatalf("got %v", resourceNames(partial))
	}
	for _, r := range partial {
		if got := addressesOf(t, r); !slices.Equal(got, want[r.Name]) {
			t.Errorf("%s: addresses %v, want %v", r.Name, got, want[r.Name])
		}
	}

	after, err := gen.Generate(proxy, world.push, w, &model.PushRequest{Full: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range after {
		isB := slices.Contains(edsNames("b"), after[i].Name)
		if shared := after[i].Resource == before[i].Resource; shared != isB {
			t.Errorf("%s: reused cached assignment = %v, want %v", after[i].Name, shared, isB)
		}
	}
}

// TestEndpointsMarshalledOnce checks that proxies of different namespaces,
// and later push context versions that keep the endpoints, share one
// marshalled assignment.
func TestEndpointsMarshalledOnce(t *testing.T) {
	world := newEDSWorld(t)
	gen := NewEndpointGenerator(Options{})
	w := &model.WatchedResource{TypeURL: EndpointType, ResourceNames: edsNames("a")}
	first, err := gen.Generate(&model.Proxy{Namespace: "default"}, world.push, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := gen.Generate(&model.Proxy{Namespace: "other"}, world.push, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A DestinationRule change elsewhere makes a new push context version
	// that reuses the endpoint index.
	world.store.UpsertConfig(&model.Config{Kind: model.KindDestinationRule, Name: "unrelated", Namespace: "default",
		CreationTime: time.Unix(2, 0), Spec: &networking.DestinationRule{Host: "unrelated.default.svc.cluster.local"}})
	next := pushcontext.Build(world.store, testPushOptions(), world.push,
		&model.PushRequest{Full: true, ConfigsUpdated: map[model.ConfigKey]struct{}{
			{Kind: model.KindDestinationRule, Namespace: "default", Name: "unrelated"}: {},
		}})
	if next.Version() == world.push.Version() {
		t.Fatal("expected a new push context version")
	}
	later, err := gen.Generate(&model.Proxy{Namespace: "default"}, next, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 3 || len(other) != 3 || len(later) != 3 {
		t.Fatalf("got %d, %d, %d resources", len(first), len(other), len(later))
	}
	for i := range first {
		if first[i].Resource != other[i].Resource {
			t.Errorf("%s: namespaces did not share the marshalled assignment", first[i].Name)
		}
		if first[i].Resource != later[i].Resource {
			t.Errorf("%s: unchanged endpoints were marshalled again for a new version", first[i].Name)
		}
	}
}

func TestClustersSharedPerNamespaceAndVersion(t *testing.T) {
	world := newEDSWorld(t)
	gen := NewClusterGenerator(Options{})
	w := &model.WatchedResource{TypeURL: ClusterType, ResourceNames: edsNames("a")}
	gen1 := func(ns string, push *pushcontext.PushContext) model.Resources {
		t.Helper()
		res, err := gen.Generate(&model.Proxy{Namespace: ns}, push, w, &model.PushRequest{Full: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 3 {
			t.Fatalf("got %v", resourceNames(res))
		}
		return res
	}
	p1, p2 := gen1("default", world.push), gen1("default", world.push)
	next := pushcontext.Build(world.store, testPushOptions(), world.push, &model.PushRequest{Full: true})
	p3 := gen1("default", next)
	for i := range p1 {
		if p1[i].Resource != p2[i].Resource {
			t.Errorf("%s: same namespace and version not shared", p1[i].Name)
		}
		if p1[i].Resource == p3[i].Resource {
			t.Errorf("%s: new version reused the old cluster", p1[i].Name)
		}
		if !proto.Equal(p1[i].Resource, p3[i].Resource) {
			t.Errorf("%s: unchanged config gave a different cluster", p1[i].Name)
		}
	}
}

// TestConcurrentGenerate runs the caching generators from many goroutines
// (as connections do) across two push versions; run with -race.
func TestConcurrentGenerate(t *testing.T) {
	world := newEDSWorld(t)
	next := pushcontext.Build(world.store, testPushOptions(), world.push, &model.PushRequest{Full: true})
	set := New(Options{})
	want := edsNames("a", "b")
	done := make(chan error)
	for i := range 8 {
		go func() {
			var err error
			for j := range 50 {
				push := world.push
				if (i+j)%2 == 0 {
					push = next
				}
				proxy := &model.Proxy{Namespace: []string{"default", "other"}[i%2]}
				for _, gen := range []Generator{set.Clusters, set.Endpoints} {
					var res model.Resources
					res, err = gen.Generate(proxy, push, &model.WatchedResource{ResourceNames: want}, nil)
					if err == nil && !slices.Equal(resourceNames(res), want) {
						err = fmt.Errorf("got %v", resourceNames(res))
					}
					if err != nil {
						break
					}
				}
			}
			done <- err
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
