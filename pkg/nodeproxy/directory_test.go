package nodeproxy

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/meshpilot/meshpilot/pkg/workloadapi"
)

func workloadAddr(uid, ns, name, node, ip string, hbone bool, services map[string][]uint32) *workloadapi.Address {
	w := &workloadapi.Workload{Uid: uid, Namespace: ns, Name: name, Node: node, ServiceAccount: name,
		Addresses: [][]byte{netip.MustParseAddr(ip).AsSlice()}, Services: map[string]*workloadapi.PortList{}}
	if hbone {
		w.TunnelProtocol = workloadapi.TunnelProtocol_HBONE
	}
	for key, ports := range services {
		w.Services[key] = &workloadapi.PortList{Ports: []*workloadapi.Port{{ServicePort: ports[0], TargetPort: ports[1]}}}
	}
	return &workloadapi.Address{Type: &workloadapi.Address_Workload{Workload: w}}
}

func serviceAddr(ns, host, vip string) *workloadapi.Address {
	return &workloadapi.Address{Type: &workloadapi.Address_Service{Service: &workloadapi.Service{
		Namespace: ns, Hostname: host,
		Addresses: []*workloadapi.NetworkAddress{{Address: netip.MustParseAddr(vip).AsSlice()}},
		Ports:     []*workloadapi.Port{{ServicePort: 80, TargetPort: 8080}},
	}}}
}

func TestDirectory(t *testing.T) {
	d := NewDirectory()
	changed := d.Changed()
	d.Apply(map[string]*workloadapi.Address{
		"Kubernetes//Pod/app/b-1":     workloadAddr("Kubernetes//Pod/app/b-1", "app", "b-1", "node-2", "10.0.0.11", true, map[string][]uint32{"app/b.app.svc.cluster.local": {80, 8080}}),
		"Kubernetes//Pod/app/b-2":     workloadAddr("Kubernetes//Pod/app/b-2", "app", "b-2", "node-1", "10.0.0.12", true, map[string][]uint32{"app/b.app.svc.cluster.local": {80, 9090}}),
		"Kubernetes//Pod/app/c":       workloadAddr("Kubernetes//Pod/app/c", "app", "c", "node-1", "10.0.0.13", false, nil),
		"app/b.app.svc.cluster.local": serviceAddr("app", "b.app.svc.cluster.local", "10.96.0.10"),
	}, nil)
	select {
	case <-changed:
	default:
		t.Fatal("Apply did not wake Changed's waiters")
	}

	if w := d.WorkloadByIP(netip.MustParseAddr("10.0.0.12")); w.GetName() != "b-2" {
		t.Errorf("WorkloadByIP(10.0.0.12) = %v", w.GetName())
	}
	if w := d.WorkloadByIP(netip.MustParseAddr("::ffff:10.0.0.12")); w.GetName() != "b-2" {
		t.Errorf("a mapped IPv4 address did not find its workload: %v", w.GetName())
	}
	svc := d.ServiceByVIP(netip.MustParseAddr("10.96.0.10"))
	if svc.GetHostname() != "b.app.svc.cluster.local" {
		t.Fatalf("ServiceByVIP = %v", svc)
	}
	eps := d.Endpoints(nil, svc, 80)
	if len(eps) != 2 || eps[0].Workload.GetName() != "b-1" || eps[0].Port != 8080 || eps[1].Port != 9090 {
		t.Errorf("endpoints of port 80: %+v", eps)
	}
	if eps := d.Endpoints(nil, svc, 81); len(eps) != 0 {
		t.Errorf("a port the service lacks has endpoints: %+v", eps)
	}
	local := d.LocalWorkloads("node-1")
	if len(local) != 1 || local[0].GetName() != "b-2" {
		t.Errorf("node-1's HBONE workloads: %v (c has no tunnel, b-1 is on node-2)", local)
	}
	if got := identity(local[0]); got != "spiffe://cluster.local/ns/app/sa/b-2" {
		t.Errorf("identity with the default trust domain: %s", got)
	}

	d.Apply(nil, []string{"Kubernetes//Pod/app/b-2", "app/b.app.svc.cluster.local"})
	if d.WorkloadByIP(netip.MustParseAddr("10.0.0.12")) != nil || d.ServiceByVIP(netip.MustParseAddr("10.96.0.10")) != nil {
		t.Error("removed addresses are still found")
	}
	if got := d.LocalWorkloads("node-1"); len(got) != 0 {
		t.Errorf("node-1 still has %v", got)
	}
	if w, s := d.Size(); w != 2 || s != 0 {
		t.Errorf("size %d workloads, %d services; want 2 and 0", w, s)
	}
	if v := d.knownVersions(); len(v) != 2 {
		t.Errorf("versions kept for %d resources, want 2", len(v))
	}
}

// TestEndpointsHealth checks that a service's connections go only to its
// healthy workloads, as ztunnel picks them: a Pod that is not Ready or is
// being deleted is sent UNHEALTHY and must not be picked, unless the
// service allows every endpoint (publishNotReadyAddresses).
func TestEndpointsHealth(t *testing.T) {
	const key = "app/b.app.svc.cluster.local"
	ports := map[string][]uint32{key: {80, 8080}}
	unhealthy := workloadAddr("Kubernetes//Pod/app/b-2", "app", "b-2", "node-1", "10.0.0.12", true, ports)
	unhealthy.GetWorkload().Status = workloadapi.WorkloadStatus_UNHEALTHY
	allowAll := serviceAddr("app", "b.app.svc.cluster.local", "10.96.0.10")
	allowAll.GetService().LoadBalancing = &workloadapi.LoadBalancing{HealthPolicy: workloadapi.LoadBalancing_ALLOW_ALL}

	for _, tc := range []struct {
		name    string
		service *workloadapi.Address
		want    []string
	}{
		{"only healthy", serviceAddr("app", "b.app.svc.cluster.local", "10.96.0.10"), []string{"b-1"}},
		{"allow all", allowAll, []string{"b-1", "b-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDirectory()
			d.Apply(map[string]*workloadapi.Address{
				"Kubernetes//Pod/app/b-1": workloadAddr("Kubernetes//Pod/app/b-1", "app", "b-1", "node-2", "10.0.0.11", true, ports),
				"Kubernetes//Pod/app/b-2": unhealthy,
				key:                       tc.service,
			}, nil)
			var got []string
			for _, ep := range d.Endpoints(nil, d.ServiceByVIP(netip.MustParseAddr("10.96.0.10")), 80) {
				got = append(got, ep.Workload.GetName())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("endpoints %v, want %v", got, tc.want)
			}
		})
	}
}

// TestEndpointsLoadBalancing checks that a service's routing preferences
// choose among its workloads relative to the client, as ztunnel does:
// STRICT keeps only those that match every scope (internalTrafficPolicy
// Local is STRICT to the node), FAILOVER the closest that exist.
func TestEndpointsLoadBalancing(t *testing.T) {
	const key = "app/b.app.svc.cluster.local"
	ports := map[string][]uint32{key: {80, 8080}}
	workload := func(name, node, ip, zone string) *workloadapi.Address {
		a := workloadAddr("Kubernetes//Pod/app/"+name, "app", name, node, ip, true, ports)
		a.GetWorkload().Locality = &workloadapi.Locality{Region: "eu", Zone: zone}
		return a
	}
	src := workload("client", "node-1", "10.0.0.1", "eu-1").GetWorkload()
	lb := func(mode workloadapi.LoadBalancing_Mode, scopes ...workloadapi.LoadBalancing_Scope) *workloadapi.LoadBalancing {
		return &workloadapi.LoadBalancing{Mode: mode, RoutingPreference: scopes}
	}
	node, region, zone := workloadapi.LoadBalancing_NODE, workloadapi.LoadBalancing_REGION, workloadapi.LoadBalancing_ZONE
	for _, tc := range []struct {
		name      string
		lb        *workloadapi.LoadBalancing
		workloads []*workloadapi.Address
		want      []string
	}{
		{"none", nil, []*workloadapi.Address{workload("b-1", "node-1", "10.0.0.11", "eu-1"), workload("b-2", "node-2", "10.0.0.12", "eu-1")}, []string{"b-1", "b-2"}},
		{"strict node", lb(workloadapi.LoadBalancing_STRICT, node), []*workloadapi.Address{workload("b-1", "node-2", "10.0.0.11", "eu-1"), workload("b-2", "node-1", "10.0.0.12", "eu-1")}, []string{"b-2"}},
		{"strict node, none local", lb(workloadapi.LoadBalancing_STRICT, node), []*workloadapi.Address{workload("b-1", "node-2", "10.0.0.11", "eu-1")}, nil},
		{"failover to the zone", lb(workloadapi.LoadBalancing_FAILOVER, region, zone), []*workloadapi.Address{workload("b-1", "node-2", "10.0.0.11", "eu-2"), workload("b-2", "node-3", "10.0.0.12", "eu-1")}, []string{"b-2"}},
		{"failover to the region", lb(workloadapi.LoadBalancing_FAILOVER, region, zone), []*workloadapi.Address{workload("b-1", "node-2", "10.0.0.11", "eu-2"), workload("b-2", "node-3", "10.0.0.12", "eu-3")}, []string{"b-1", "b-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := serviceAddr("app", "b.app.svc.cluster.local", "10.96.0.10")
			svc.GetService().LoadBalancing = tc.lb
			all := map[string]*workloadapi.Address{key: svc}
			for _, w := range tc.workloads {
				all[w.GetWorkload().GetUid()] = w
			}
			d := NewDirectory()
			d.Apply(all, nil)
			var got []string
			for _, ep := range d.Endpoints(src, svc.GetService(), 80) {
				got = append(got, ep.Workload.GetName())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("endpoints %v, want %v", got, tc.want)
			}
		})
	}
}

// TestWorkloadByIPShared checks which workload owns an IP that several
// share, as ztunnel decides: a host-network workload (a Pod on its node's
// IP, an EndpointSlice address) is never found by IP, since the IP is not
// its own; among the rest a Pod outranks anything else and one with HBONE
// one without, and the smallest uid breaks a tie, whatever order WDS sent
// them in.
func TestWorkloadByIPShared(t *testing.T) {
	const ip = "10.0.0.5"
	hostNet := func(a *workloadapi.Address) *workloadapi.Address {
		a.GetWorkload().NetworkMode = workloadapi.NetworkMode_HOST_NETWORK
		return a
	}
	var (
		podHBONE     = workloadAddr("Kubernetes//Pod/app/z-hbone", "app", "z-hbone", "node-1", ip, true, nil)
		podPlain     = workloadAddr("Kubernetes//Pod/app/a-plain", "app", "a-plain", "node-1", ip, false, nil)
		podPlain2    = workloadAddr("Kubernetes//Pod/app/b-plain", "app", "b-plain", "node-1", ip, false, nil)
		entryHBONE   = workloadAddr("Kubernetes/networking.istio.io/WorkloadEntry/app/e", "app", "e", "", ip, true, nil)
		hostNetPod   = hostNet(workloadAddr("Kubernetes//Pod/kube-system/agent", "kube-system", "agent", "node-1", ip, false, nil))
		sliceAddress = hostNet(workloadAddr("Kubernetes/discovery.k8s.io/EndpointSlice/app/ext-1/"+ip, "app", "ext-1", "", ip, false, nil))
	)
	for _, tc := range []struct {
		name string
		in   []*workloadapi.Address
		want string // uid; "" for none
	}{
		{"host network alone is not found", []*workloadapi.Address{hostNetPod}, ""},
		{"pod beside host network", []*workloadapi.Address{hostNetPod, podPlain, sliceAddress}, "Kubernetes//Pod/app/a-plain"},
		{"HBONE pod over plain pod", []*workloadapi.Address{podPlain, podHBONE, podPlain2}, "Kubernetes//Pod/app/z-hbone"},
		{"pod over HBONE non-pod", []*workloadapi.Address{entryHBONE, podPlain2}, "Kubernetes//Pod/app/b-plain"},
		{"smallest uid among equals", []*workloadapi.Address{podPlain2, podPlain}, "Kubernetes//Pod/app/a-plain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Map iteration varies between runs: look up many times,
			// each from a fresh directory.
			for range 20 {
				d := NewDirectory()
				update := map[string]*workloadapi.Address{}
				for _, a := range tc.in {
					update[a.GetWorkload().GetUid()] = a
				}
				d.Apply(update, nil)
				if got := d.WorkloadByIP(netip.MustParseAddr(ip)).GetUid(); got != tc.want {
					t.Fatalf("WorkloadByIP(%s) = %q, want %q", ip, got, tc.want)
				}
			}
		})
	}
}
