package pushcontext

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	networking "istio.io/api/networking/v1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// TestConcurrentReadsDuringUpdateEndpoints is meant for -race: readers on
// several goroutines use the snapshot while the push loop swaps entries. Each
// list a reader gets must come from one entry, so all its endpoints carry
// the same generation label.
func TestConcurrentReadsDuringUpdateEndpoints(t *testing.T) {
	const services, generations = 8, 200
	store := model.NewStore()
	var names []model.NamespacedName
	endpointsFor := func(gen int) []*model.Endpoint {
		g := strconv.Itoa(gen)
		var eps []*model.Endpoint
		for i := range 4 {
			v := "v" + strconv.Itoa(i%2+1)
			eps = append(eps,
				newEndpoint(addr(i), "http", map[string]string{"version": v, "gen": g}),
				newEndpoint(addr(i+100), "grpc", map[string]string{"version": v, "gen": g}))
		}
		return eps
	}
	for i := range services {
		n := model.NamespacedName{Namespace: "ns-" + strconv.Itoa(i%2), Name: "svc-" + strconv.Itoa(i)}
		names = append(names, n)
		store.UpsertService(newService(n.Namespace, n.Name, nil))
		store.SetEndpoints(n, "s", endpointsFor(0))
	}
	store.UpsertConfig(ruleConfig("istio-system", "all", 0, &networking.DestinationRule{
		Host: "*", Subsets: []*networking.Subset{subset("v1", version("v1"))},
	}))
	pc := Build(store, testOpts, nil, nil)

	var stop atomic.Bool
	var failures atomic.Int64
	var wg sync.WaitGroup
	consistent := func(eps []*model.Endpoint, portName string, want map[string]string) bool {
		for _, ep := range eps {
			if ep.ServicePortName != portName || ep.Labels["gen"] != eps[0].Labels["gen"] || !hasLabels(ep.Labels, labelPairs(want)) {
				return false
			}
		}
		return true
	}
	for range 3 {
		wg.Go(func() {
			for !stop.Load() {
				for _, n := range names {
					host := hostname(n.Namespace, n.Name)
					_ = pc.EndpointsVersion(host)
					ok := consistent(pc.Endpoints(host, 80, nil), "http", nil) &&
						consistent(pc.Endpoints(host, 80, version("v1")), "http", version("v1")) &&
						consistent(pc.Endpoints(host, 9090, version("v2")), "grpc", version("v2")) && // lazily cached
						len(pc.ServicesVisibleTo(n.Namespace)) == services &&
						pc.DestinationRuleFor(n.Namespace, host) != nil
					if !ok {
						failures.Add(1)
					}
				}
			}
		})
	}
	for gen := 1; gen <= generations; gen++ {
		for _, n := range names {
			store.SetEndpoints(n, "s", endpointsFor(gen))
		}
		if changed := pc.UpdateEndpoints(store, names).Hosts; len(changed) != services {
			t.Errorf("generation %d: %d services changed, want %d", gen, len(changed), services)
		}
	}
	stop.Store(true)
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Errorf("%d reads saw an inconsistent snapshot", n)
	}
	for _, n := range names {
		eps := pc.Endpoints(hostname(n.Namespace, n.Name), 80, nil)
		if len(eps) != 4 || eps[0].Labels["gen"] != strconv.Itoa(generations) {
			t.Errorf("%s: final endpoints are not the last generation: %v", n, eps)
		}
	}
}

// TestConcurrentProxyLookups is meant for -race: the lookups generators make
// per proxy, and the lazily filled caches behind them, from many goroutines
// at once on one snapshot.
func TestConcurrentProxyLookups(t *testing.T) {
	store := model.NewStore()
	for i := range 6 {
		ns := "ns-" + strconv.Itoa(i%2)
		name := "svc-" + strconv.Itoa(i)
		svc := newService(ns, name, nil)
		svc.Selector = map[string]string{"app": name}
		store.UpsertService(svc)
		store.UpsertWorkload(&model.Workload{Name: name + "-pod", Namespace: ns, IPs: []string{addr(i)}, Labels: map[string]string{"app": name}})
	}
	store.UpsertConfig(ruleConfig("ns-0", "plain", 0, &networking.DestinationRule{Host: "*", Subsets: []*networking.Subset{subset("v1", version("v1"))}}))
	store.UpsertConfig(ruleConfig("ns-0", "selected", 1, &networking.DestinationRule{
		Host: "*", WorkloadSelector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "svc-0"}},
		Subsets: []*networking.Subset{subset("v2", version("v2"))},
	}))
	prev := Build(store, testOpts, nil, nil)
	store.UpsertConfig(ruleConfig("ns-0", "plain", 0, &networking.DestinationRule{Host: "*"}))
	req := pushRequest(key(model.KindDestinationRule, "ns-0", "plain"))
	pc := Build(store, testOpts, prev, req)

	var failures atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				n := (g + i) % 6
				proxy := &model.Proxy{Namespace: "ns-" + strconv.Itoa(n%2), IPAddresses: []string{addr(n)}}
				w := pc.WorkloadForProxy(proxy)
				if w == nil {
					failures.Add(1)
					continue
				}
				proxy.Labels = w.Labels
				targets := pc.ServiceTargets(w)
				if len(targets) != 1 || targets[0].Name != "svc-"+strconv.Itoa(n) {
					failures.Add(1)
				}
				rule := pc.DestinationRuleForProxy(proxy, targets[0].Hostname)
				if selected := n == 0; selected != (rule.Subset("v2") != nil) {
					failures.Add(1)
				}
				// The "*" rule of ns-0 lost its subset: every host changed
				// for proxies in ns-0.
				if changes := pc.RuleChanges(prev, req); !changes[targets[0].Hostname].SubsetsChanged {
					failures.Add(1)
				}
				pc.ReportProblem(key(model.KindDestinationRule, "ns-0", "plain"), "reason "+strconv.Itoa(i%3))
			}
		})
	}
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Errorf("%d lookups went wrong", n)
	}
	if got := pc.ProblemCount(); got != 3 {
		t.Errorf("ProblemCount = %d, want 3", got)
	}
}
