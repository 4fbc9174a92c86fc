package pushcontext

import (
	"testing"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func TestAddressIndexLookups(t *testing.T) {
	store := model.NewStore()
	store.UpsertWorkload(&model.Workload{Name: "a", Namespace: "ns", IPs: []string{"10.0.0.1", "fd00::1"}})
	// Every address is on the cluster's network, the system namespace's
	// label; a Pod's own label is not read.
	store.UpsertNamespace(&model.Namespace{Name: "istio-system", Labels: map[string]string{model.NetworkLabel: "net2"}})
	store.UpsertWorkload(&model.Workload{Name: "b", Namespace: "ns", IPs: []string{"10.0.0.2"}, Labels: map[string]string{model.NetworkLabel: "net3"}})
	store.UpsertWorkload(&model.Workload{Name: "pending", Namespace: "ns"})
	store.UpsertWorkload(&model.Workload{Name: "garbage", Namespace: "ns", IPs: []string{"not-an-ip"}})
	store.UpsertService(&model.Service{Name: "echo", Namespace: "ns", Hostname: "echo.ns.svc.cluster.local",
		ClusterIPs: []string{"10.96.0.10", "bad"}})
	pc := Build(store, Options{}, nil, nil)

	ws, uids := pc.AddressedWorkloads()
	if len(ws) != 2 || uids[0] != "Kubernetes//Pod/ns/a" || uids[1] != "Kubernetes//Pod/ns/b" {
		t.Fatalf("addressed workloads %v, want a and b only (no IP, or an invalid one, is no address)", uids)
	}
	cases := []struct {
		name    string
		network string
		ip      string
		want    string
	}{
		{"ipv4 on the cluster's network", "net2", "10.0.0.1", "a"},
		{"ipv6, any spelling", "net2", "fd00:0::1", "a"},
		{"a Pod's own network label is not read", "net2", "10.0.0.2", "b"},
		{"right IP, the Pod's label's network", "net3", "10.0.0.2", ""},
		{"right IP, default network", "", "10.0.0.1", ""},
		{"unknown IP", "net2", "10.0.0.9", ""},
		{"not an IP", "net2", "x", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if w := pc.WorkloadByAddress(tc.network, tc.ip); w != nil {
				got = w.Name
			}
			if got != tc.want {
				t.Errorf("WorkloadByAddress(%q, %q) = %q, want %q", tc.network, tc.ip, got, tc.want)
			}
		})
	}
	if w := pc.WorkloadByUID("Kubernetes//Pod/ns/b"); w == nil || w.Name != "b" {
		t.Errorf("WorkloadByUID = %v, want b", w)
	}
	if pc.Network() != "net2" {
		t.Errorf("Network() = %q, want the system namespace's label", pc.Network())
	}
	if svc := pc.ServiceByVIP("net2", "10.96.0.10"); svc == nil || svc.Name != "echo" {
		t.Errorf("ServiceByVIP = %v, want echo", svc)
	}
	if ws, svc := pc.LookupAddress("net2/10.96.0.10"); ws != nil || svc == nil {
		t.Errorf("LookupAddress of a VIP = %v, %v; want the service", ws, svc)
	}
}

// TestTunnelsTo: a Pod gets HBONE only when it asks for ambient mode (by
// its namespace or its own label, not opted out) and its capture is in
// place (the CNI agent's annotation).
func TestTunnelsTo(t *testing.T) {
	ambient := map[string]string{model.DataplaneModeLabel: model.DataplaneModeAmbient}
	none := map[string]string{model.DataplaneModeLabel: model.DataplaneModeNone}
	cases := []struct {
		name       string
		ns         string
		labels     map[string]string
		redirected bool
		want       bool
	}{
		{"ambient namespace, captured", "amb", nil, true, true},
		{"ambient namespace, capture not in place yet", "amb", nil, false, false},
		{"pod labelled in a plain namespace, captured", "plain", ambient, true, true},
		{"pod opted out of an ambient namespace, annotation lingering", "amb", none, true, false},
		{"plain namespace, annotation alone", "plain", nil, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := model.NewStore()
			store.UpsertNamespace(&model.Namespace{Name: "amb", Labels: ambient})
			store.UpsertNamespace(&model.Namespace{Name: "plain"})
			w := &model.Workload{Name: "p", Namespace: tc.ns, Labels: tc.labels, IPs: []string{"10.0.0.1"}, Redirected: tc.redirected}
			store.UpsertWorkload(w)
			if got := Build(store, Options{}, nil, nil).TunnelsTo(w); got != tc.want {
				t.Errorf("TunnelsTo = %v, want %v", got, tc.want)
			}
		})
	}
}
