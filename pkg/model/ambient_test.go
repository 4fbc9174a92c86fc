package model

import "testing"

func TestAmbientEnabled(t *testing.T) {
	ambient := map[string]string{DataplaneModeLabel: DataplaneModeAmbient}
	none := map[string]string{DataplaneModeLabel: DataplaneModeNone}
	cases := []struct {
		name        string
		pod, ns     map[string]string
		wantAmbient bool
	}{
		{"neither labelled", nil, nil, false},
		{"namespace labelled", nil, ambient, true},
		{"pod labelled", ambient, nil, true},
		{"pod opts out of its namespace", none, ambient, false},
		{"other value on the namespace", nil, map[string]string{DataplaneModeLabel: "sidecar"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := AmbientEnabled(tc.pod, tc.ns); got != tc.wantAmbient {
				t.Errorf("AmbientEnabled = %v, want %v", got, tc.wantAmbient)
			}
		})
	}
}

func TestCanonicalService(t *testing.T) {
	cases := []struct {
		name                   string
		labels                 map[string]string
		wantName, wantRevision string
	}{
		{"no labels", nil, "reviews", "latest"},
		{"app and version", map[string]string{"app": "a", "version": "v1"}, "a", "v1"},
		{"kubernetes recommended labels win over app", map[string]string{
			"app": "a", "app.kubernetes.io/name": "k", "version": "v1", "app.kubernetes.io/version": "kv",
		}, "k", "kv"},
		{"canonical labels win", map[string]string{
			"app": "a", "service.istio.io/canonical-name": "c", "version": "v1", "service.istio.io/canonical-revision": "cr",
		}, "c", "cr"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name, rev := CanonicalService(tc.labels, "reviews")
			if name != tc.wantName || rev != tc.wantRevision {
				t.Errorf("CanonicalService = %q, %q; want %q, %q", name, rev, tc.wantName, tc.wantRevision)
			}
		})
	}
}

func TestWorkloadPortByName(t *testing.T) {
	w := &Workload{NamedPorts: []NamedPort{{"grpc", 9090}, {"http", 8080}}}
	for name, want := range map[string]uint32{"grpc": 9090, "http": 8080, "metrics": 0} {
		if got := w.PortByName(name); got != want {
			t.Errorf("PortByName(%q) = %d, want %d", name, got, want)
		}
	}
}
