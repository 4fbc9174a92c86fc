package grpcgen

import (
	"testing"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// BenchmarkEndpointUpdate measures the endpoint fast path end to end, from
// one EndpointSlice's endpoints landing in the store to the marshalled
// ClusterLoadAssignments a proxy watching every cluster is sent: no push
// context rebuild, and only the changed service's assignments.
func BenchmarkEndpointUpdate(b *testing.B) {
	store, names := benchStore(b)
	push := pushcontext.Build(store, testPushOptions(), nil, nil)
	gen := NewEndpointGenerator(Options{})
	proxy := &model.Proxy{Namespace: "default"}
	w := &model.WatchedResource{ResourceNames: names}
	if _, err := gen.Generate(proxy, push, w, &model.PushRequest{Full: true}); err != nil {
		b.Fatal(err) // warm the cache: every other service's assignment is marshalled already
	}
	svc := model.NamespacedName{Namespace: "default", Name: "svc-0500"}
	original := store.Endpoints(svc)
	variants := [2][]*model.Endpoint{original, original[:len(original)-2]} // one endpoint (both ports) leaves and returns
	req := &model.PushRequest{ConfigsUpdated: map[model.ConfigKey]struct{}{{Kind: model.KindEndpoints, Namespace: svc.Namespace, Name: svc.Name}: {}}}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		store.SetEndpoints(svc, "slice", variants[i%2])
		if changed := push.UpdateEndpoints(store, []model.NamespacedName{svc}).Hosts; len(changed) != 1 {
			b.Fatalf("UpdateEndpoints changed %v", changed)
		}
		res, err := gen.Generate(proxy, push, w, req)
		if err != nil {
			b.Fatal(err)
		}
		if len(res) != 2 { // the service's two ports
			b.Fatalf("got %d load assignments, want 2", len(res))
		}
	}
}
