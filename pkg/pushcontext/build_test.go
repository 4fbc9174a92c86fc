package pushcontext

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	networking "istio.io/api/networking/v1"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// view is everything a reader can observe of a snapshot, for comparing an
// incrementally built snapshot with one built from scratch.
type view struct {
	Services  []string
	Visible   map[string][]string
	Rules     map[string][]string
	Subsets   map[string][]string
	Endpoints map[string][]string
	// ProxyRules are what proxies with some labels resolve, per namespace.
	ProxyRules map[string][]string
	Workloads  map[string]string   // IP -> namespace/name
	Targets    map[string][]string // workload -> hostnames
	// MTLS is the inbound mutual TLS of proxies with some labels, per
	// namespace, and Identities the identities behind each service.
	MTLS       map[string]string
	Identities map[string][]string
	// Addresses is what WDS reads: uids, the workload or service behind
	// each "<network>/<ip>", and the ambient namespaces.
	Addresses []string
}

var (
	viewNamespaces = []string{"ns-0", "ns-1", "ns-2", "ns-3", "istio-system", "elsewhere"}
	viewLabelSets  = []map[string]string{nil, version("v1"), version("v2"), {"zone": "a"}}
	viewProxies    = []map[string]string{nil, {"app": "svc-0"}, {"app": "svc-1"}, {"app": "svc-4", "version": "v1"}}
)

func observe(pc *PushContext) view {
	v := view{
		Services:  hostnames(pc.Services()),
		Visible:   map[string][]string{},
		Rules:     map[string][]string{},
		Subsets:   map[string][]string{},
		Endpoints: map[string][]string{},

		ProxyRules: map[string][]string{},
		Workloads:  map[string]string{},
		Targets:    map[string][]string{},
		MTLS:       map[string]string{},
		Identities: map[string][]string{},
	}
	for _, ns := range viewNamespaces {
		v.Visible[ns] = hostnames(pc.ServicesVisibleTo(ns))
		for _, svc := range pc.Services() {
			rule := pc.DestinationRuleFor(ns, svc.Hostname)
			v.Rules[ns+" "+svc.Hostname] = fromNames(rule)
			v.Subsets[ns+" "+svc.Hostname] = subsetNames(rule)
			for _, labels := range viewProxies {
				policy := pc.InboundMTLS(ns, labels)
				v.MTLS[ns+" "+labelKey(labels)] = fmt.Sprint(policy.Mode, policy.Ports)
				proxyRule := pc.DestinationRuleForProxy(&model.Proxy{Namespace: ns, Labels: labels}, svc.Hostname)
				k := ns + " " + labelKey(labels) + " " + svc.Hostname
				v.ProxyRules[k] = append(fromNames(proxyRule), subsetNames(proxyRule)...)
			}
		}
	}
	for i := range 3 * 12 {
		w := pc.WorkloadByIP(addr(i))
		if w == nil {
			continue
		}
		v.Workloads[addr(i)] = workloadName(w)
		v.Targets[workloadName(w)] = hostnamesOrNil(pc.ServiceTargets(w))
		if a := pc.WorkloadByAddress(pc.Network(), addr(i)); a != nil {
			v.Addresses = append(v.Addresses, pc.Network()+"/"+addr(i)+" "+pc.WorkloadUID(a))
		}
	}
	_, uids := pc.AddressedWorkloads()
	v.Addresses = append(v.Addresses, uids...)
	for _, svc := range pc.Services() {
		for _, vip := range svc.ClusterIPs {
			if s := pc.ServiceByVIP(pc.Network(), vip); s != nil {
				v.Addresses = append(v.Addresses, pc.Network()+"/"+vip+" "+s.Hostname)
			}
		}
	}
	for _, ns := range viewNamespaces {
		if pc.AmbientNamespace(ns) {
			v.Addresses = append(v.Addresses, "ambient "+ns)
		}
	}
	for _, svc := range pc.Services() {
		v.Identities[svc.Hostname] = pc.ServiceIdentities(svc.Hostname).List()
		for _, p := range svc.Ports {
			for _, labels := range viewLabelSets {
				k := svc.Hostname + " " + strconv.Itoa(int(p.Port)) + " " + labelKey(labels)
				for _, ep := range pc.Endpoints(svc.Hostname, p.Port, labels) {
					v.Endpoints[k] = append(v.Endpoints[k], fmt.Sprintf("%s mtls=%v", ep.Address, ep.MTLS))
				}
			}
		}
	}
	return v
}

func svcName(i int) model.NamespacedName {
	return model.NamespacedName{Namespace: "ns-" + strconv.Itoa(i%4), Name: "svc-" + strconv.Itoa(i)}
}

func incrementalStore() model.Store {
	store := model.NewStore()
	for i := range 12 {
		n := svcName(i)
		var exportTo model.ExportTo
		if i%5 == 0 {
			exportTo = model.ExportTo{n.Namespace, "elsewhere"}
		}
		svc := newService(n.Namespace, n.Name, exportTo)
		svc.Selector = map[string]string{"app": n.Name}
		store.UpsertService(svc)
		store.UpsertWorkload(pod(n.Namespace, n.Name+"-pod", map[string]string{"app": n.Name, "version": "v1"}, addr(3*i)))
		eps := []*model.Endpoint{
			newEndpoint(addr(3*i), "http", version("v1")),
			newEndpoint(addr(3*i+1), "http", version("v2")),
			newEndpoint(addr(3*i+2), "grpc", map[string]string{"version": "v1", "zone": "a"}),
		}
		for _, ep := range eps {
			// Sidecars, which workload policies can take auto mTLS from.
			ep.Namespace, ep.MTLS = n.Namespace, true
		}
		store.SetEndpoints(n, "s", eps)
		if i%3 == 0 {
			store.UpsertConfig(ruleConfig(n.Namespace, n.Name, i, &networking.DestinationRule{
				Host: n.Name, Subsets: []*networking.Subset{subset("v1", version("v1"))},
			}))
		}
	}
	store.UpsertConfig(ruleConfig("istio-system", "zones", 100, &networking.DestinationRule{
		Host: "*.ns-1.svc.cluster.local", Subsets: []*networking.Subset{subset("zone-a", map[string]string{"zone": "a"})},
	}))
	return store
}

func TestIncrementalBuild(t *testing.T) {
	store := incrementalStore()
	pc := Build(store, testOpts, nil, nil)
	all := []string{indexServices, indexDestinationRules, indexResolution, indexEndpoints, indexWorkloads, indexServiceTargets, indexIngress, indexCredentials, indexPeerAuthentication, indexVirtualServices, indexAddresses}

	steps := []struct {
		name string
		// change writes the store and returns the push request for it.
		change      func(pc *PushContext) *model.PushRequest
		wantRebuilt []string
		// wantNewEntries names the services whose endpoint entries must be new
		// objects; every other service keeps its entry. nil with endpoints
		// reused means the whole index is the previous one.
		wantNewEntries []string
	}{
		{
			name: "namespace change rebuilds the address index only (ambient labels)",
			change: func(*PushContext) *model.PushRequest {
				store.UpsertNamespace(&model.Namespace{Name: "ns-0", Labels: map[string]string{"x": "y"}})
				return pushRequest(key(model.KindNamespace, "", "ns-0"))
			},
			wantRebuilt: []string{indexAddresses},
		},
		{
			name: "the system namespace's network label rebuilds the address index only",
			change: func(*PushContext) *model.PushRequest {
				store.UpsertNamespace(&model.Namespace{Name: "istio-system", Labels: map[string]string{model.NetworkLabel: "net-1"}})
				return pushRequest(key(model.KindNamespace, "", "istio-system"))
			},
			wantRebuilt: []string{indexAddresses},
		},
		{
			name: "destination rule change rebuilds rules and the affected subset lists",
			change: func(*PushContext) *model.PushRequest {
				store.UpsertConfig(ruleConfig("ns-3", "svc-3", 3, &networking.DestinationRule{
					Host: "svc-3", Subsets: []*networking.Subset{subset("v1", version("v1")), subset("v2", version("v2"))},
				}))
				return pushRequest(key(model.KindDestinationRule, "ns-3", "svc-3"))
			},
			wantRebuilt:    []string{indexDestinationRules, indexResolution, indexEndpoints, indexCredentials},
			wantNewEntries: []string{"svc-3"},
		},
		{
			name: "selector rule added",
			change: func(*PushContext) *model.PushRequest {
				store.UpsertConfig(ruleConfig("ns-0", "for-svc-4", 4, &networking.DestinationRule{
					Host: "*", Subsets: []*networking.Subset{subset("v2", version("v2"))},
					WorkloadSelector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "svc-4"}},
				}))
				return pushRequest(key(model.KindDestinationRule, "ns-0", "for-svc-4"))
			},
			wantRebuilt: []string{indexDestinationRules, indexResolution, indexEndpoints, indexCredentials},
			// Every service but svc-3 (whose rule declares v2 since an
			// earlier step) gets the new label set.
			wantNewEntries: []string{"svc-0", "svc-1", "svc-10", "svc-11", "svc-2", "svc-4", "svc-5", "svc-6", "svc-7", "svc-8", "svc-9"},
		},
		{
			name: "workload change rebuilds the workload and address indexes only",
			change: func(*PushContext) *model.PushRequest {
				store.UpsertWorkload(pod("ns-1", "svc-1-pod", map[string]string{"app": "svc-0"}, addr(3)))
				store.UpsertWorkload(pod("ns-1", "extra", map[string]string{"app": "svc-1"}, addr(35)))
				return pushRequest(key(model.KindWorkload, "ns-1", "svc-1-pod"), key(model.KindWorkload, "ns-1", "extra"))
			},
			wantRebuilt: []string{indexWorkloads, indexServiceTargets, indexAddresses},
		},
		{
			name: "service change rebuilds services and only that service's entry",
			change: func(*PushContext) *model.PushRequest {
				store.UpsertService(newService("ns-2", "svc-2", model.ExportTo{"ns-3"}))
				return pushRequest(key(model.KindService, "ns-2", "svc-2"))
			},
			wantRebuilt:    []string{indexServices, indexResolution, indexEndpoints, indexServiceTargets, indexAddresses},
			wantNewEntries: []string{"svc-2"},
		},
		{
			name: "a full push picks up the endpoint changes it lists",
			change: func(*PushContext) *model.PushRequest {
				store.SetEndpoints(svcName(7), "extra", []*model.Endpoint{newEndpoint("10.7.7.7", "grpc", version("v2"))})
				return pushRequest(key(model.KindNamespace, "", "ns-1"), key(model.KindEndpoints, "ns-3", "svc-7"))
			},
			wantRebuilt:    []string{indexEndpoints, indexAddresses},
			wantNewEntries: []string{"svc-7"},
		},
		{
			name: "endpoints updated on the fast path survive a later incremental build",
			change: func(pc *PushContext) *model.PushRequest {
				store.SetEndpoints(svcName(5), "s", []*model.Endpoint{newEndpoint("10.5.5.5", "http", version("v1"))})
				if got := pc.UpdateEndpoints(store, []model.NamespacedName{svcName(5)}).Hosts; len(got) != 1 {
					t.Errorf("UpdateEndpoints changed %v, want svc-5", got)
				}
				store.UpsertConfig(ruleConfig("ns-0", "svc-0", 0, &networking.DestinationRule{Host: "svc-0"}))
				return pushRequest(key(model.KindDestinationRule, "ns-0", "svc-0"))
			},
			wantRebuilt:    []string{indexDestinationRules, indexResolution, indexEndpoints, indexCredentials},
			wantNewEntries: []string{"svc-0"},
		},
		{
			name: "wildcard rule change touches every service it matches",
			change: func(*PushContext) *model.PushRequest {
				store.DeleteConfig(key(model.KindDestinationRule, "istio-system", "zones"))
				return pushRequest(key(model.KindDestinationRule, "istio-system", "zones"))
			},
			wantRebuilt:    []string{indexDestinationRules, indexResolution, indexEndpoints, indexCredentials},
			wantNewEntries: []string{"svc-1", "svc-5", "svc-9"},
		},
		{
			name: "service deleted",
			change: func(*PushContext) *model.PushRequest {
				store.DeleteService(svcName(4))
				return pushRequest(key(model.KindService, "ns-0", "svc-4"))
			},
			wantRebuilt:    []string{indexServices, indexResolution, indexEndpoints, indexServiceTargets, indexAddresses},
			wantNewEntries: []string{},
		},
		{
			name: "peer authentication change rebuilds its index, and endpoints keep their entries",
			change: func(*PushContext) *model.PushRequest {
				store.UpsertConfig(&model.Config{
					Kind: model.KindPeerAuthentication, Namespace: "ns-1", Name: "strict-svc-1",
					Spec: &security.PeerAuthentication{
						Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "svc-1"}},
						Mtls:     &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_STRICT},
					},
				})
				return pushRequest(key(model.KindPeerAuthentication, "ns-1", "strict-svc-1"))
			},
			// A policy with a selector may take auto mTLS from endpoints;
			// this one takes it from none.
			wantRebuilt:    []string{indexPeerAuthentication, indexEndpoints},
			wantNewEntries: []string{},
		},
		{
			name: "a workload policy that disables mutual TLS renews the entries of the endpoints it selects",
			change: func(*PushContext) *model.PushRequest {
				store.UpsertConfig(&model.Config{
					Kind: model.KindPeerAuthentication, Namespace: "ns-1", Name: "plain-v2",
					Spec: &security.PeerAuthentication{
						Selector: &typev1beta1.WorkloadSelector{MatchLabels: version("v2")},
						Mtls:     &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_DISABLE},
					},
				})
				return pushRequest(key(model.KindPeerAuthentication, "ns-1", "plain-v2"))
			},
			// svc-5's endpoints were replaced by one of v1 above.
			wantRebuilt:    []string{indexPeerAuthentication, indexEndpoints},
			wantNewEntries: []string{"svc-1", "svc-9"},
		},
		{
			name: "and deleting it renews them again",
			change: func(*PushContext) *model.PushRequest {
				store.DeleteConfig(key(model.KindPeerAuthentication, "ns-1", "plain-v2"))
				return pushRequest(key(model.KindPeerAuthentication, "ns-1", "plain-v2"))
			},
			wantRebuilt:    []string{indexPeerAuthentication, indexEndpoints},
			wantNewEntries: []string{"svc-1", "svc-9"},
		},
		{
			name: "virtual service change rebuilds its index only",
			change: func(*PushContext) *model.PushRequest {
				store.UpsertConfig(&model.Config{
					Kind: model.KindVirtualService, Namespace: "ns-1", Name: "svc-1",
					Spec: &networking.VirtualService{Hosts: []string{"svc-1"}, Http: []*networking.HTTPRoute{{
						Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "svc-1", Subset: "v2"}}},
					}}},
				})
				return pushRequest(key(model.KindVirtualService, "ns-1", "svc-1"))
			},
			wantRebuilt: []string{indexVirtualServices},
		},
		{
			name: "forced full push rebuilds everything",
			change: func(*PushContext) *model.PushRequest {
				return &model.PushRequest{Full: true}
			},
			wantRebuilt:    all,
			wantNewEntries: []string{"svc-0", "svc-1", "svc-10", "svc-11", "svc-2", "svc-3", "svc-5", "svc-6", "svc-7", "svc-8", "svc-9"},
		},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			prev := pc
			req := step.change(prev)
			// After the change: it may use the endpoint fast path on prev.
			before := entriesByName(prev)
			pc = Build(store, testOpts, prev, req)

			if diff := cmp.Diff(observe(Build(store, testOpts, nil, nil)), observe(pc)); diff != "" {
				t.Fatalf("incremental snapshot differs from a fresh one (-fresh +incremental):\n%s", diff)
			}
			info := pc.BuildInfo()
			if diff := cmp.Diff(sortedCopy(step.wantRebuilt), sortedCopy(info.Rebuilt)); diff != "" {
				t.Errorf("rebuilt indexes (-want +got):\n%s", diff)
			}
			if len(info.Rebuilt)+len(info.Reused) != len(all) {
				t.Errorf("build info accounts for %v + %v, want every index once", info.Rebuilt, info.Reused)
			}
			reused := map[string]bool{}
			for _, name := range info.Reused {
				reused[name] = true
			}
			identity := map[string]bool{
				indexServices:           pc.services == prev.services,
				indexDestinationRules:   pc.rules == prev.rules,
				indexResolution:         pc.resolution == prev.resolution,
				indexEndpoints:          pc.endpoints == prev.endpoints,
				indexWorkloads:          pc.workloads == prev.workloads,
				indexServiceTargets:     pc.targets == prev.targets,
				indexIngress:            pc.ingress == prev.ingress,
				indexCredentials:        pc.credentials == prev.credentials,
				indexPeerAuthentication: pc.peerAuthn == prev.peerAuthn,
				indexVirtualServices:    pc.virtualServices == prev.virtualServices,
				indexAddresses:          pc.addresses == prev.addresses,
			}
			for _, name := range all {
				if identity[name] != reused[name] {
					t.Errorf("index %s: same object as before = %v, reported reused = %v", name, identity[name], reused[name])
				}
			}
			after := entriesByName(pc)
			var newEntries []string
			for name, e := range after {
				if before[name] != e {
					newEntries = append(newEntries, name)
				}
			}
			if reused[indexEndpoints] {
				if len(newEntries) != 0 {
					t.Errorf("endpoint index reused but entries changed: %v", newEntries)
				}
				return
			}
			if diff := cmp.Diff(sortedCopy(step.wantNewEntries), sortedCopy(newEntries)); diff != "" {
				t.Errorf("services with new endpoint entries (-want +got):\n%s", diff)
			}
		})
	}
}

func entriesByName(pc *PushContext) map[string]*endpointEntry {
	out := map[string]*endpointEntry{}
	for i, svc := range pc.services.all {
		out[svc.Name] = pc.endpoints.slots[i].entry.Load()
	}
	return out
}

func TestBuildVersions(t *testing.T) {
	store := incrementalStore()
	first := Build(store, testOpts, nil, nil)
	second := Build(store, testOpts, first, pushRequest(key(model.KindNamespace, "", "x")))
	third := Build(store, testOpts, second, nil)
	seen := map[string]bool{}
	for _, pc := range []*PushContext{first, second, third} {
		if seen[pc.Version()] {
			t.Errorf("version %s repeats", pc.Version())
		}
		seen[pc.Version()] = true
	}
	host := hostname("ns-1", "svc-1")
	if third.EndpointsVersion(host) == first.EndpointsVersion(host) {
		t.Error("a full rebuild must hand out new endpoint versions, or generator caches could serve stale data")
	}
	if first.EndpointsVersion("unknown.host") != 0 {
		t.Error("unknown host should have version 0")
	}
	changedOpts := testOpts
	changedOpts.DomainSuffix = "example.org"
	if info := Build(store, changedOpts, first, pushRequest(key(model.KindNamespace, "", "x"))).BuildInfo(); !info.Full {
		t.Error("changed options must force a full rebuild")
	}
}

func TestSummary(t *testing.T) {
	build := func() *PushContext {
		store := incrementalStore()
		store.UpsertConfig(ruleConfig("ns-0", "dup", 50, &networking.DestinationRule{
			Host: "svc-0", Subsets: []*networking.Subset{subset("v1", version("other"))},
		}))
		return Build(store, testOpts, nil, nil)
	}
	a, b := build().Summary(), build().Summary()
	for _, s := range []*Summary{&a, &b} {
		s.Version, s.BuildTime, s.BuildDuration = "", time.Time{}, "" // differ by design
	}
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("two builds of equal stores summarise differently (-a +b):\n%s", diff)
	}
	wantCounts := SummaryCounts{Services: 12, Endpoints: 36, DestinationRules: 6, MergedDestinationRules: 5}
	if diff := cmp.Diff(wantCounts, a.Counts); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if len(a.Problems) != 1 || a.Problems[0].Name != "dup" {
		t.Errorf("problems = %+v, want the dropped duplicate subset of ns-0/dup", a.Problems)
	}
	var merged *RuleSummary
	for i := range a.DestinationRules {
		if a.DestinationRules[i].Host == hostname("ns-0", "svc-0") {
			merged = &a.DestinationRules[i]
		}
	}
	if merged == nil || !cmp.Equal(merged.From, []string{"ns-0/svc-0", "ns-0/dup"}) {
		t.Errorf("merged rule summary = %+v", merged)
	}
	// svc-0, svc-5 and svc-10 are exported to their namespace and "elsewhere".
	var elsewhere *NamespaceVisibility
	for i := range a.Visibility.Namespaces {
		if a.Visibility.Namespaces[i].Namespace == "elsewhere" {
			elsewhere = &a.Visibility.Namespaces[i]
		}
	}
	if elsewhere == nil || len(elsewhere.RestrictedServices) != 3 || elsewhere.VisibleServices != 12 {
		t.Errorf("visibility of elsewhere = %+v", elsewhere)
	}
	if _, err := json.Marshal(a); err != nil {
		t.Errorf("summary does not marshal: %v", err)
	}
}

// TestSummarySourceProblems: what a source could not read shows in the
// summary of the next build, which rebuilds no index for it.
func TestSummarySourceProblems(t *testing.T) {
	store := incrementalStore()
	prev := Build(store, testOpts, nil, nil)
	if got := prev.Summary().SourceProblems; got == nil || len(got) != 0 {
		t.Errorf("source problems of a clean store = %#v, want an empty list", got)
	}
	problem := model.SourceProblem{File: "/config/echo.yaml", Line: 9, Message: "yaml: did not find expected key"}
	store.SetSourceProblems("file", []model.SourceProblem{problem})
	req := model.NewPushRequest(model.ConfigKey{Kind: model.KindSourceProblems, Name: "file"}, time.Now())
	pc := Build(store, testOpts, prev, req)
	problem.Source = "file"
	if diff := cmp.Diff([]model.SourceProblem{problem}, pc.Summary().SourceProblems); diff != "" {
		t.Errorf("source problems (-want +got)\n%s", diff)
	}
	if info := pc.BuildInfo(); info.Full || len(info.Rebuilt) != 0 {
		t.Errorf("a source problem rebuilt %v (full %v), want nothing", info.Rebuilt, info.Full)
	}
}
