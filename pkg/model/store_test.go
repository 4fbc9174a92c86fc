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
		{"status of a missing ingress", func(s Store) { s.SetIngressStatus(svc, []LoadBalancerIngress{{IP: "10.0.0.9"}}) }, nil},
		{"ingress status", func(s Store) {
			s.UpsertIngress(&Ingress{Namespace: "ns", Name: "echo"})
			s.SetIngressStatus(svc, []LoadBalancerIngress{{IP: "10.0.0.9"}})
		}, []ConfigKey{{KindIngress, "ns", "echo"}, {KindIngressStatus, "ns", "echo"}}},
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

// A workload change is announced (and so pushed in full) only when some
// proxy may see it: a workload without IPs is no proxy's, and node proxies
// see every field of one with IPs.
func TestStoreAnnouncesWorkloadChangesProxiesSee(t *testing.T) {
	pod := func(sa string, labels map[string]string, ips ...string) *Workload {
		return &Workload{Name: "p", Namespace: "ns", ServiceAccount: sa, Labels: labels, IPs: ips}
	}
	v1, v2 := map[string]string{"version": "v1"}, map[string]string{"version": "v2"}
	podKey := ConfigKey{KindWorkload, "ns", "p"}
	cases := []struct {
		name string
		// before is stored (announced or not) before the events are recorded.
		before *Workload
		mutate func(Store)
		want   []ConfigKey
	}{
		{"a pending pod appears", nil, func(s Store) { s.UpsertWorkload(pod("sa", v1)) }, nil},
		{"a pending pod is bound and relabelled", pod("", v1), func(s Store) { s.UpsertWorkload(pod("sa", v2)) }, nil},
		{"a pending pod is deleted", pod("sa", v1), func(s Store) { s.DeleteWorkload(NamespacedName{"ns", "p"}) }, nil},
		{"a pod appears with its IP", nil, func(s Store) { s.UpsertWorkload(pod("sa", v1, "10.0.0.1")) }, []ConfigKey{podKey}},
		{"a pod gets its IP", pod("sa", v1), func(s Store) { s.UpsertWorkload(pod("sa", v1, "10.0.0.1")) }, []ConfigKey{podKey}},
		{"a pod's IP changes", pod("sa", v1, "10.0.0.1"), func(s Store) { s.UpsertWorkload(pod("sa", v1, "10.0.0.2")) }, []ConfigKey{podKey}},
		{"a running pod relabelled", pod("sa", v1, "10.0.0.1"), func(s Store) { s.UpsertWorkload(pod("sa", v2, "10.0.0.1")) }, []ConfigKey{podKey}},
		// Node proxies are sent the identity, readiness and capture of
		// every workload with an IP (WDS).
		{"a running pod's service account changes", pod("sa", v1, "10.0.0.1"), func(s Store) { s.UpsertWorkload(pod("other", v1, "10.0.0.1")) }, []ConfigKey{podKey}},
		{"a running pod becomes ready", pod("sa", v1, "10.0.0.1"), func(s Store) {
			w := pod("sa", v1, "10.0.0.1")
			w.Ready = true
			s.UpsertWorkload(w)
		}, []ConfigKey{podKey}},
		{"a running pod's capture is in place", pod("sa", v1, "10.0.0.1"), func(s Store) {
			w := pod("sa", v1, "10.0.0.1")
			w.Redirected = true
			s.UpsertWorkload(w)
		}, []ConfigKey{podKey}},
		{"a running pod stored again unchanged", pod("sa", v1, "10.0.0.1"), func(s Store) { s.UpsertWorkload(pod("sa", v1, "10.0.0.1")) }, nil},
		{"a running pod is deleted", pod("sa", v1, "10.0.0.1"), func(s Store) { s.DeleteWorkload(NamespacedName{"ns", "p"}) }, []ConfigKey{podKey}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore()
			if tc.before != nil {
				s.UpsertWorkload(tc.before)
			}
			var got []ConfigKey
			s.OnChange(func(k ConfigKey) { got = append(got, k) })
			tc.mutate(s)
			if !slices.Equal(got, tc.want) {
				t.Errorf("events %v, want %v", got, tc.want)
			}
		})
	}
	// What is not announced is still stored: the next full build reads it.
	s := NewStore()
	s.UpsertWorkload(pod("", v1))
	s.UpsertWorkload(pod("other", v1))
	if ws := s.Workloads(); len(ws) != 1 || ws[0].ServiceAccount != "other" {
		t.Errorf("workloads %+v, want the pod with its new service account", ws)
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
	before := s.Endpoints(svc)
	c1, b2 := &Endpoint{Address: "c1"}, &Endpoint{Address: "b2"}
	s.SetEndpoints(svc, "slice-c", []*Endpoint{c1})
	s.SetEndpoints(svc, "slice-b", []*Endpoint{b2})
	if got := s.Endpoints(svc); !slices.Equal(got, []*Endpoint{a1, a2, b2, c1}) {
		t.Fatalf("after adding slice-c and replacing slice-b: %v", got)
	}
	if !slices.Equal(before, []*Endpoint{a1, a2, b1}) {
		t.Fatalf("a list read earlier changed under its reader: %v", before)
	}
	s.SetEndpoints(svc, "slice-a", nil)
	s.SetEndpoints(svc, "slice-c", nil)
	if got := s.Endpoints(svc); !slices.Equal(got, []*Endpoint{b2}) {
		t.Fatalf("after removing slice-a and slice-c: %v", got)
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

// SetIngressStatus changes the status alone, in a copy: a reader holding
// the Ingress (a cached translation) keeps what it read, and the revision
// that cache is keyed by stays.
func TestStoreSetIngressStatus(t *testing.T) {
	s := NewStore()
	key := NamespacedName{Namespace: "ns", Name: "web"}
	old := &Ingress{Namespace: "ns", Name: "web", Revision: "1", Rules: []IngressRule{{Host: "a"}}}
	s.UpsertIngress(old)
	s.SetIngressStatus(key, []LoadBalancerIngress{{IP: "10.0.0.9"}})
	got := s.Ingress(key)
	if got.Revision != "1" || len(got.Rules) != 1 || !slices.Equal(got.LoadBalancer, []LoadBalancerIngress{{IP: "10.0.0.9"}}) {
		t.Errorf("stored %+v, want revision 1, the rule and the new status", got)
	}
	if old.LoadBalancer != nil {
		t.Errorf("the Ingress stored before was changed: %+v", old)
	}
	if all := s.Ingresses(); len(all) != 1 || all[0] != got {
		t.Errorf("Ingresses() = %v, want the updated Ingress", all)
	}
}
