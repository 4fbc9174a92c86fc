package pushcontext

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	networking "istio.io/api/networking/v1"

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
		if changed := pc.UpdateEndpoints(store, names); len(changed) != services {
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
