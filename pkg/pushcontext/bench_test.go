package pushcontext

import (
	"strconv"
	"testing"

	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

const benchNamespaces = 20

func benchName(i int) model.NamespacedName {
	return model.NamespacedName{Namespace: "ns-" + strconv.Itoa(i%benchNamespaces), Name: "svc-" + strconv.Itoa(i)}
}

// benchEndpoints returns 10 endpoints over both ports and two versions;
// shift changes the addresses so a new call gives different endpoints.
func benchEndpoints(i, shift int, labels [2]map[string]string) []*model.Endpoint {
	eps := make([]*model.Endpoint, 10)
	for j := range eps {
		port := "http"
		if j%2 == 1 {
			port = "grpc"
		}
		eps[j] = newEndpoint(addr(i*10+j+shift), port, labels[j/5])
	}
	return eps
}

// benchStore holds n services with 10 endpoints and 2 ports each, spread
// over 20 namespaces, and one DestinationRule with two subsets per 10
// services.
func benchStore(n int) model.Store {
	store := model.NewStore()
	labels := [2]map[string]string{version("v1"), version("v2")}
	for i := range n {
		name := benchName(i)
		store.UpsertService(newService(name.Namespace, name.Name, nil))
		store.SetEndpoints(name, name.Name+"-abcde", benchEndpoints(i, 0, labels))
		if i%10 == 0 {
			store.UpsertConfig(ruleConfig(name.Namespace, name.Name, i, &networking.DestinationRule{
				Host: name.Name,
				TrafficPolicy: &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
					LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_LEAST_REQUEST},
				}},
				Subsets: []*networking.Subset{subset("v1", labels[0]), subset("v2", labels[1])},
			}))
		}
	}
	return store
}

func BenchmarkPushContextBuild(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		store := benchStore(n)
		b.Run("services="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Build(store, testOpts, nil, nil)
			}
		})
		// The common incremental cases, for comparison with a full build.
		prev := Build(store, testOpts, nil, nil)
		drChange := pushRequest(key(model.KindDestinationRule, "ns-0", "svc-0"))
		b.Run("services="+strconv.Itoa(n)+"/destinationrule-change", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Build(store, testOpts, prev, drChange)
			}
		})
		svcChange := pushRequest(key(model.KindService, "ns-0", "svc-0"))
		b.Run("services="+strconv.Itoa(n)+"/service-change", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Build(store, testOpts, prev, svcChange)
			}
		})
	}
}

func BenchmarkEndpointUpdate(b *testing.B) {
	store := benchStore(10000)
	pc := Build(store, testOpts, nil, nil)
	const target = 10 // has a DestinationRule with two subsets
	name := benchName(target)
	labels := [2]map[string]string{version("v1"), version("v2")}
	variants := [2][]*model.Endpoint{benchEndpoints(target, 1, labels), benchEndpoints(target, 2, labels)}
	services := []model.NamespacedName{name}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		store.SetEndpoints(name, name.Name+"-abcde", variants[i%2])
		if changed := pc.UpdateEndpoints(store, services).Hosts; len(changed) != 1 {
			b.Fatalf("changed = %v", changed)
		}
		i++
	}
}

func BenchmarkEndpointsLookup(b *testing.B) {
	store := benchStore(1000)
	pc := Build(store, testOpts, nil, nil)
	host := hostname(benchName(10).Namespace, benchName(10).Name)
	v1 := version("v1")
	b.Run("all", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = pc.Endpoints(host, 80, nil)
		}
	})
	b.Run("declared-subset", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = pc.Endpoints(host, 80, v1)
		}
	})
	b.Run("destinationrule", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = pc.DestinationRuleFor("ns-3", host)
		}
	})
	proxy := &model.Proxy{Namespace: "ns-3", Labels: map[string]string{"app": "web"}}
	b.Run("destinationrule-for-proxy", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = pc.DestinationRuleForProxy(proxy, host)
		}
	})
}

// BenchmarkRuleChanges measures the answer for one changed rule at 10,000
// services, without the memo.
func BenchmarkRuleChanges(b *testing.B) {
	store := benchStore(10000)
	prev := Build(store, testOpts, nil, nil)
	req := pushRequest(key(model.KindDestinationRule, "ns-10", "svc-10"))
	pc := Build(store, testOpts, prev, req)
	b.ReportAllocs()
	for b.Loop() {
		if changes := pc.computeRuleChanges(prev, req); len(changes) != 1 {
			b.Fatalf("changes = %v", changes)
		}
	}
}
