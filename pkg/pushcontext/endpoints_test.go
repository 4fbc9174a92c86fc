package pushcontext

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func endpointStore() model.Store {
	store := model.NewStore()
	svc := model.NamespacedName{Namespace: "bookinfo", Name: "reviews"}
	store.UpsertService(newService("bookinfo", "reviews", nil))
	store.SetEndpoints(svc, "slice-a", []*model.Endpoint{
		newEndpoint("10.0.0.1", "http", version("v1")),
		newEndpoint("10.0.0.2", "http", version("v2")),
		newEndpoint("10.0.0.3", "grpc", version("v1")),
	})
	store.SetEndpoints(svc, "slice-b", []*model.Endpoint{
		newEndpoint("10.0.0.4", "grpc", map[string]string{"version": "v2", "zone": "a"}),
		newEndpoint("10.0.0.5", "metrics", version("v1")), // no such service port
	})
	single := &model.Service{
		Name: "single", Namespace: "bookinfo", Hostname: hostname("bookinfo", "single"),
		Ports: []*model.Port{{Port: 80, Protocol: model.ProtocolTCP}}, // unnamed, as Kubernetes allows for one port
	}
	store.UpsertService(single)
	store.SetEndpoints(single.Key(), "s", []*model.Endpoint{{Address: "10.0.1.1", Port: 80}})
	store.UpsertConfig(ruleConfig("bookinfo", "reviews", 0, &networking.DestinationRule{
		Host:    "reviews",
		Subsets: []*networking.Subset{subset("v1", version("v1")), subset("all", nil)},
	}))
	store.UpsertConfig(ruleConfig("istio-system", "wild", 1, &networking.DestinationRule{
		Host:    "*.bookinfo.svc.cluster.local",
		Subsets: []*networking.Subset{subset("zone-a", map[string]string{"zone": "a"})},
	}))
	return store
}

func TestEndpoints(t *testing.T) {
	pc := Build(endpointStore(), testOpts, nil, nil)
	tests := []struct {
		name   string
		host   string
		port   uint32
		labels map[string]string
		want   []string
	}{
		{name: "port by name", host: reviews, port: 80, want: []string{"10.0.0.1", "10.0.0.2"}},
		{name: "other port, across slices", host: reviews, port: 9090, want: []string{"10.0.0.3", "10.0.0.4"}},
		{name: "empty labels mean no restriction", host: reviews, port: 80, labels: map[string]string{}, want: []string{"10.0.0.1", "10.0.0.2"}},
		{name: "declared subset", host: reviews, port: 80, labels: version("v1"), want: []string{"10.0.0.1"}},
		{name: "subset from a wildcard rule", host: reviews, port: 9090, labels: map[string]string{"zone": "a"}, want: []string{"10.0.0.4"}},
		{name: "undeclared label set", host: reviews, port: 9090, labels: version("v2"), want: []string{"10.0.0.4"}},
		{name: "several labels", host: reviews, port: 9090, labels: map[string]string{"version": "v2", "zone": "a"}, want: []string{"10.0.0.4"}},
		{name: "no endpoint matches", host: reviews, port: 80, labels: version("v3"), want: nil},
		{name: "unknown port", host: reviews, port: 81, want: nil},
		{name: "unknown host", host: ratings, port: 80, want: nil},
		{name: "unnamed single port", host: hostname("bookinfo", "single"), port: 80, want: []string{"10.0.1.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Twice: the second call of an undeclared label set is served from the cache.
			for range 2 {
				got := addresses(pc.Endpoints(tt.host, tt.port, tt.labels))
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Fatalf("Endpoints(%s, %d, %v) (-want +got):\n%s", tt.host, tt.port, tt.labels, diff)
				}
			}
		})
	}
}

func TestEndpointsPrecomputesDeclaredSubsets(t *testing.T) {
	pc := Build(endpointStore(), testOpts, nil, nil)
	entry := pc.endpoints.slots[pc.services.byHost[reviews]].entry.Load()
	var keys []string
	for _, s := range entry.subsets {
		keys = append(keys, s.key)
	}
	// The empty-label subset "all" is served by the unfiltered lists.
	if diff := cmp.Diff([]string{"version=v1", "zone=a"}, keys); diff != "" {
		t.Errorf("precomputed subsets (-want +got):\n%s", diff)
	}
	if got := testing.AllocsPerRun(100, func() { _ = pc.Endpoints(reviews, 80, version("v1")) }); got != 0 {
		t.Errorf("Endpoints for a declared subset allocates %v times", got)
	}
	first := pc.Endpoints(reviews, 9090, version("v2"))
	second := pc.Endpoints(reviews, 9090, version("v2"))
	if len(first) == 0 || &first[0] != &second[0] {
		t.Error("an undeclared label set should be computed once and then shared")
	}
}

func TestUpdateEndpoints(t *testing.T) {
	store := model.NewStore()
	names := []string{"a", "b", "c"}
	for i, n := range names {
		store.UpsertService(newService("ns", n, nil))
		store.SetEndpoints(model.NamespacedName{Namespace: "ns", Name: n}, "s",
			[]*model.Endpoint{newEndpoint(addr(i), "http", version("v1"))})
	}
	store.UpsertConfig(ruleConfig("ns", "b", 0, &networking.DestinationRule{
		Host: "b", Subsets: []*networking.Subset{subset("v1", version("v1")), subset("v2", version("v2"))},
	}))
	pc := Build(store, testOpts, nil, nil)

	entries := func() map[string]*endpointEntry {
		out := map[string]*endpointEntry{}
		for _, n := range names {
			out[n] = pc.endpoints.slots[pc.services.byName[model.NamespacedName{Namespace: "ns", Name: n}]].entry.Load()
		}
		return out
	}
	versions := func() map[string]uint64 {
		out := map[string]uint64{}
		for _, n := range names {
			out[n] = pc.EndpointsVersion(hostname("ns", n))
		}
		return out
	}
	b := model.NamespacedName{Namespace: "ns", Name: "b"}
	unknown := model.NamespacedName{Namespace: "ns", Name: "not-built-yet"}

	steps := []struct {
		name        string
		write       func()
		wantChanged []string
		wantV2      []string // addresses of b's v2 subset on port 80 afterwards
	}{
		{
			name: "new endpoints for one service",
			write: func() {
				store.SetEndpoints(b, "s2", []*model.Endpoint{newEndpoint("10.9.0.1", "http", version("v2"))})
			},
			wantChanged: []string{hostname("ns", "b")},
			wantV2:      []string{"10.9.0.1"},
		},
		{
			name:        "nothing changed",
			write:       func() {},
			wantChanged: nil,
			wantV2:      []string{"10.9.0.1"},
		},
		{
			name: "identical endpoints re-created",
			write: func() {
				store.SetEndpoints(b, "s2", []*model.Endpoint{newEndpoint("10.9.0.1", "http", version("v2"))})
			},
			wantChanged: nil,
			wantV2:      []string{"10.9.0.1"},
		},
		{
			name:        "slice removed",
			write:       func() { store.SetEndpoints(b, "s2", nil) },
			wantChanged: []string{hostname("ns", "b")},
			wantV2:      nil,
		},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			beforeEntries, beforeVersions := entries(), versions()
			step.write()
			changed := pc.UpdateEndpoints(store, []model.NamespacedName{b, unknown}).Hosts
			if diff := cmp.Diff(step.wantChanged, changed); diff != "" {
				t.Errorf("changed hosts (-want +got):\n%s", diff)
			}
			afterEntries, afterVersions := entries(), versions()
			for _, n := range names {
				touched := n == "b" && len(step.wantChanged) > 0
				if (afterEntries[n] != beforeEntries[n]) != touched {
					t.Errorf("entry of %s replaced = %v, want %v", n, afterEntries[n] != beforeEntries[n], touched)
				}
				if (afterVersions[n] != beforeVersions[n]) != touched {
					t.Errorf("version of %s changed = %v, want %v", n, afterVersions[n] != beforeVersions[n], touched)
				}
			}
			if diff := cmp.Diff(step.wantV2, addresses(pc.Endpoints(hostname("ns", "b"), 80, version("v2")))); diff != "" {
				t.Errorf("b v2 endpoints (-want +got):\n%s", diff)
			}
			if got := addresses(pc.Endpoints(hostname("ns", "b"), 80, nil)); !contains(got, addr(1)) {
				t.Errorf("b endpoints %v lost the untouched slice", got)
			}
			if len(afterEntries["b"].subsets) != 2 {
				t.Errorf("b entry has %d precomputed subsets after the update, want 2", len(afterEntries["b"].subsets))
			}
		})
	}
}
