package model

import (
	"slices"
	"testing"
	"time"
)

func TestStoreAnnouncesOnlyRealChanges(t *testing.T) {
	svc := NamespacedName{Namespace: "ns", Name: "echo"}
	ep := &Endpoint{Address: "10.0.0.1", Port: 80}
	cases := []struct {
		name   string
		mutate func(Store)
		want   []ConfigKey
	}{
		{"upsert service", func(s Store) { s.UpsertService(&Service{Name: "echo", Namespace: "ns"}) },
			[]ConfigKey{{KindService, "ns", "echo"}}},
		{"delete missing service", func(s Store) { s.DeleteService(svc) }, nil},
		{"set endpoints", func(s Store) { s.SetEndpoints(svc, "a", []*Endpoint{ep}) },
			[]ConfigKey{{KindEndpoints, "ns", "echo"}}},
		{"clear a slice never set", func(s Store) { s.SetEndpoints(svc, "a", nil) }, nil},
		{"set then clear", func(s Store) { s.SetEndpoints(svc, "a", []*Endpoint{ep}); s.SetEndpoints(svc, "a", nil) },
			[]ConfigKey{{KindEndpoints, "ns", "echo"}, {KindEndpoints, "ns", "echo"}}},
		{"namespace", func(s Store) { s.UpsertNamespace(&Namespace{Name: "ns"}); s.DeleteNamespace("ns") },
			[]ConfigKey{{Kind: KindNamespace, Name: "ns"}, {Kind: KindNamespace, Name: "ns"}}},
		{"delete missing config", func(s Store) { s.DeleteConfig(ConfigKey{KindDestinationRule, "ns", "x"}) }, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore()
			var got []ConfigKey
			s.OnChange(func(k ConfigKey) { got = append(got, k) })
			tc.mutate(s)
			if !slices.Equal(got, tc.want) {
				t.Errorf("events %v, want %v", got, tc.want)
			}
		})
	}
}

func TestStoreEndpointsJoinSlicesInNameOrder(t *testing.T) {
	s := NewStore()
	svc := NamespacedName{Namespace: "ns", Name: "echo"}
	a1, a2, b1 := &Endpoint{Address: "a1"}, &Endpoint{Address: "a2"}, &Endpoint{Address: "b1"}
	s.SetEndpoints(svc, "slice-b", []*Endpoint{b1})
	s.SetEndpoints(svc, "slice-a", []*Endpoint{a1, a2})
	if got := s.Endpoints(svc); !slices.Equal(got, []*Endpoint{a1, a2, b1}) {
		t.Fatalf("endpoints %v", got)
	}
	s.SetEndpoints(svc, "slice-a", nil)
	if got := s.Endpoints(svc); !slices.Equal(got, []*Endpoint{b1}) {
		t.Fatalf("after removing slice-a: %v", got)
	}
	s.SetEndpoints(svc, "slice-b", nil)
	if got := s.Endpoints(svc); got != nil {
		t.Fatalf("after removing every slice: %v", got)
	}
}

func TestStoreServicesSortedAndRefreshed(t *testing.T) {
	s := NewStore()
	s.UpsertService(&Service{Name: "b", Namespace: "ns", Hostname: "b.ns"})
	s.UpsertService(&Service{Name: "a", Namespace: "ns", Hostname: "a.ns"})
	hosts := func() []string {
		var out []string
		for _, svc := range s.Services() {
			out = append(out, svc.Hostname)
		}
		return out
	}
	if got := hosts(); !slices.Equal(got, []string{"a.ns", "b.ns"}) {
		t.Fatalf("services %v", got)
	}
	s.DeleteService(NamespacedName{Namespace: "ns", Name: "a"})
	if got := hosts(); !slices.Equal(got, []string{"b.ns"}) {
		t.Fatalf("after delete: %v", got)
	}
}

func TestStoreConfigsOldestFirst(t *testing.T) {
	s := NewStore()
	now := time.Now()
	s.UpsertConfig(&Config{Kind: KindDestinationRule, Namespace: "ns", Name: "new", CreationTime: now})
	s.UpsertConfig(&Config{Kind: KindDestinationRule, Namespace: "ns", Name: "old", CreationTime: now.Add(-time.Hour)})
	s.UpsertConfig(&Config{Kind: KindDestinationRule, Namespace: "a", Name: "tie", CreationTime: now})
	var names []string
	for _, c := range s.Configs(KindDestinationRule) {
		names = append(names, c.Name)
	}
	if want := []string{"old", "tie", "new"}; !slices.Equal(names, want) {
		t.Fatalf("order %v, want %v", names, want)
	}
}

func TestStoreIngressesOldestFirstAndRefreshed(t *testing.T) {
	s := NewStore()
	now := time.Now()
	s.UpsertIngress(&Ingress{Namespace: "b", Name: "new", CreationTime: now})
	s.UpsertIngress(&Ingress{Namespace: "b", Name: "old", CreationTime: now.Add(-time.Hour)})
	s.UpsertIngress(&Ingress{Namespace: "a", Name: "tie", CreationTime: now})
	names := func() []string {
		var out []string
		for _, ing := range s.Ingresses() {
			out = append(out, ing.Name)
		}
		return out
	}
	if got, want := names(), []string{"old", "tie", "new"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	s.DeleteIngress(NamespacedName{Namespace: "b", Name: "old"})
	if got, want := names(), []string{"tie", "new"}; !slices.Equal(got, want) {
		t.Fatalf("after delete %v, want %v", got, want)
	}
}
