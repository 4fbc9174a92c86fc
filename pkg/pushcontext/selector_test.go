package pushcontext

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	networking "istio.io/api/networking/v1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// selectorRule is a rule for host with a workloadSelector on labels, the
// given subsets and, when lb is set, a simple load balancer policy.
func selectorRule(host string, labels map[string]string, lb networking.LoadBalancerSettings_SimpleLB, subsets ...*networking.Subset) *networking.DestinationRule {
	r := &networking.DestinationRule{
		Host:             host,
		WorkloadSelector: &typev1beta1.WorkloadSelector{MatchLabels: labels},
		Subsets:          subsets,
	}
	if lb != 0 {
		r.TrafficPolicy = lbPolicy(lb)
	}
	return r
}

func lbPolicy(lb networking.LoadBalancerSettings_SimpleLB) *networking.TrafficPolicy {
	return &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
		LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: lb},
	}}
}

func plainRule(host string, lb networking.LoadBalancerSettings_SimpleLB, subsets ...*networking.Subset) *networking.DestinationRule {
	r := &networking.DestinationRule{Host: host, Subsets: subsets}
	if lb != 0 {
		r.TrafficPolicy = lbPolicy(lb)
	}
	return r
}

func app(a string) map[string]string { return map[string]string{"app": a} }

func TestDestinationRuleForProxy(t *testing.T) {
	const (
		leastRequest = networking.LoadBalancerSettings_LEAST_REQUEST
		random       = networking.LoadBalancerSettings_RANDOM
		roundRobin   = networking.LoadBalancerSettings_ROUND_ROBIN
	)
	type lookup struct {
		ns          string
		labels      map[string]string
		host        string
		wantFrom    []string // nil: no rule
		wantSubsets []string
		wantLB      networking.LoadBalancerSettings_SimpleLB // 0: no policy
	}
	tests := []struct {
		name    string
		configs []*model.Config
		lookups []lookup
	}{
		{
			name: "a selected proxy gets the selector rule over the selector-less one of its namespace",
			configs: []*model.Config{
				ruleConfig("frontend", "all", 0, plainRule(reviews, roundRobin, subset("v1", version("v1")), subset("v2", version("v2")))),
				ruleConfig("frontend", "for-web", 1, selectorRule(reviews, app("web"), leastRequest, subset("v2", version("v2-canary")), subset("v3", version("v3")))),
			},
			lookups: []lookup{
				{"frontend", map[string]string{"app": "web", "x": "y"}, reviews,
					[]string{"frontend/for-web", "frontend/all"}, []string{"v2", "v3", "v1"}, leastRequest},
				{"frontend", app("api"), reviews, []string{"frontend/all"}, []string{"v1", "v2"}, roundRobin},
				{"frontend", nil, reviews, []string{"frontend/all"}, []string{"v1", "v2"}, roundRobin},
			},
		},
		{
			name: "the parent's traffic policy fills in for a selector rule without one, whatever the order",
			configs: []*model.Config{
				ruleConfig("frontend", "for-web", 0, selectorRule(reviews, app("web"), 0, subset("v3", version("v3")))),
				ruleConfig("frontend", "all", 1, plainRule(reviews, random)),
			},
			lookups: []lookup{
				{"frontend", app("web"), reviews, []string{"frontend/for-web", "frontend/all"}, []string{"v3"}, random},
				{"frontend", app("api"), reviews, []string{"frontend/all"}, nil, random},
			},
		},
		{
			name: "selector rules apply only in their own namespace",
			configs: []*model.Config{
				ruleConfig("bookinfo", "service-ns", 0, plainRule(reviews, roundRobin)),
				ruleConfig("bookinfo", "for-web", 1, selectorRule(reviews, app("web"), leastRequest)),
				ruleConfig("istio-system", "root-for-web", 2, selectorRule("*", app("web"), random)),
			},
			lookups: []lookup{
				{"frontend", app("web"), reviews, []string{"bookinfo/service-ns"}, nil, roundRobin},
				{"bookinfo", app("web"), reviews, []string{"bookinfo/for-web", "bookinfo/service-ns"}, nil, leastRequest},
				{"istio-system", app("web"), reviews, []string{"istio-system/root-for-web"}, nil, random},
				{"frontend", app("web"), ratings, nil, nil, 0},
			},
		},
		{
			name: "without a selector-less rule in the namespace the selector rule stands alone",
			configs: []*model.Config{
				ruleConfig("bookinfo", "service-ns", 0, plainRule(reviews, roundRobin, subset("v1", version("v1")))),
				ruleConfig("frontend", "for-web", 1, selectorRule(reviews, app("web"), 0)),
			},
			lookups: []lookup{
				// As in Istio, rules of the proxy's namespace shadow the
				// service namespace's; they are not merged across.
				{"frontend", app("web"), reviews, []string{"frontend/for-web"}, nil, 0},
				{"frontend", app("api"), reviews, []string{"bookinfo/service-ns"}, []string{"v1"}, roundRobin},
			},
		},
		{
			name: "equal selectors merge oldest first; different ones stay apart and the oldest matching wins",
			configs: []*model.Config{
				ruleConfig("frontend", "web-a", 0, selectorRule(reviews, app("web"), 0, subset("a", version("a")))),
				ruleConfig("frontend", "canary", 1, selectorRule(reviews, map[string]string{"track": "canary"}, random, subset("c", version("c")))),
				ruleConfig("frontend", "web-b", 2, selectorRule(reviews, app("web"), leastRequest, subset("a", version("dup")), subset("b", version("b")))),
			},
			lookups: []lookup{
				{"frontend", app("web"), reviews, []string{"frontend/web-a", "frontend/web-b"}, []string{"a", "b"}, leastRequest},
				{"frontend", map[string]string{"app": "web", "track": "canary"}, reviews,
					[]string{"frontend/web-a", "frontend/web-b"}, []string{"a", "b"}, leastRequest},
				{"frontend", map[string]string{"track": "canary"}, reviews, []string{"frontend/canary"}, []string{"c"}, random},
			},
		},
		{
			name: "the most specific host wins across both kinds of rule",
			configs: []*model.Config{
				ruleConfig("frontend", "exact-plain", 0, plainRule(reviews, roundRobin)),
				ruleConfig("frontend", "wild-selected", 1, selectorRule("*.bookinfo.svc.cluster.local", app("web"), leastRequest)),
				ruleConfig("frontend", "wild-plain", 2, plainRule("*.svc.cluster.local", random)),
			},
			lookups: []lookup{
				{"frontend", app("web"), reviews, []string{"frontend/exact-plain"}, nil, roundRobin},
				// For ratings the selector rule's host is the more specific;
				// the parent is only a rule for exactly the same host.
				{"frontend", app("web"), ratings, []string{"frontend/wild-selected"}, nil, leastRequest},
				{"frontend", app("api"), ratings, []string{"frontend/wild-plain"}, nil, random},
			},
		},
		{
			name: "an empty selector selects every proxy of the namespace",
			configs: []*model.Config{
				ruleConfig("frontend", "everyone", 0, selectorRule(reviews, nil, random)),
			},
			lookups: []lookup{
				{"frontend", nil, reviews, []string{"frontend/everyone"}, nil, random},
				{"backend", nil, reviews, nil, nil, 0},
			},
		},
		{
			name: "a short host resolves in the rule's namespace",
			configs: []*model.Config{
				ruleConfig("bookinfo", "short", 0, selectorRule("reviews", app("web"), random)),
			},
			lookups: []lookup{
				{"bookinfo", app("web"), reviews, []string{"bookinfo/short"}, nil, random},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := model.NewStore()
			store.UpsertService(newService("bookinfo", "reviews", nil))
			store.UpsertService(newService("bookinfo", "ratings", nil))
			for _, c := range tt.configs {
				store.UpsertConfig(c)
			}
			pc := Build(store, testOpts, nil, nil)
			for _, l := range tt.lookups {
				got := pc.DestinationRuleForProxy(&model.Proxy{Namespace: l.ns, Labels: l.labels}, l.host)
				desc := l.ns + " " + labelKey(l.labels) + " " + l.host
				if diff := cmp.Diff(l.wantFrom, fromNames(got)); diff != "" {
					t.Errorf("%s: From (-want +got):\n%s", desc, diff)
				}
				if diff := cmp.Diff(l.wantSubsets, subsetNames(got)); diff != "" {
					t.Errorf("%s: subsets (-want +got):\n%s", desc, diff)
				}
				var lb networking.LoadBalancerSettings_SimpleLB
				if got != nil {
					lb = got.Spec.GetTrafficPolicy().GetLoadBalancer().GetSimple()
				}
				if lb != l.wantLB {
					t.Errorf("%s: load balancer %v, want %v", desc, lb, l.wantLB)
				}
				if got != nil && got.Spec.Host != l.host && got.Spec.Host[0] != '*' {
					t.Errorf("%s: Spec.Host = %q", desc, got.Spec.Host)
				}
			}
			// Selector rules never leak into the selector-less lookup.
			for _, l := range tt.lookups {
				for _, from := range fromNames(pc.DestinationRuleFor(l.ns, l.host)) {
					for _, c := range tt.configs {
						if c.Namespace+"/"+c.Name == from && c.Spec.(*networking.DestinationRule).WorkloadSelector != nil {
							t.Errorf("DestinationRuleFor(%s, %s) includes selector rule %s", l.ns, l.host, from)
						}
					}
				}
			}
		})
	}
}

func TestDestinationRuleForProxyWithoutSelectorsIsDestinationRuleFor(t *testing.T) {
	store := incrementalStore()
	store.UpsertConfig(ruleConfig("ns-2", "selected", 200, selectorRule("svc-2", app("x"), networking.LoadBalancerSettings_RANDOM)))
	pc := Build(store, testOpts, nil, nil)
	for _, ns := range viewNamespaces {
		for _, svc := range pc.Services() {
			proxy := &model.Proxy{Namespace: ns, Labels: app("y")}
			if got, want := pc.DestinationRuleForProxy(proxy, svc.Hostname), pc.DestinationRuleFor(ns, svc.Hostname); got != want {
				t.Errorf("%s %s: unselected proxy got %v, want the shared %v", ns, svc.Hostname, fromNames(got), fromNames(want))
			}
		}
		if got, want := pc.HasWorkloadSelectorRules(ns), ns == "ns-2"; got != want {
			t.Errorf("HasWorkloadSelectorRules(%s) = %v, want %v", ns, got, want)
		}
	}
	if pc.DestinationRuleForProxy(nil, hostname("ns-2", "svc-2")) != nil {
		t.Error("nil proxy got a rule")
	}
}

func TestSelectorRulesInSummaryAndSubsets(t *testing.T) {
	store := model.NewStore()
	store.UpsertService(newService("bookinfo", "reviews", nil))
	store.SetEndpoints(model.NamespacedName{Namespace: "bookinfo", Name: "reviews"}, "s", []*model.Endpoint{
		newEndpoint("10.0.0.1", "http", version("v1")), newEndpoint("10.0.0.2", "http", version("v9")),
	})
	store.UpsertConfig(ruleConfig("frontend", "for-web", 0, selectorRule(reviews, app("web"), 0, subset("v9", version("v9")))))
	pc := Build(store, testOpts, nil, nil)
	s := pc.Summary()
	if len(s.Problems) != 0 {
		t.Errorf("problems = %+v, want none: selector rules are supported", s.Problems)
	}
	if len(s.DestinationRules) != 1 || !cmp.Equal(s.DestinationRules[0].WorkloadSelector, app("web")) {
		t.Errorf("rule summaries = %+v, want the selector rule with its selector", s.DestinationRules)
	}
	if s.Counts.DestinationRules != 1 || s.Counts.MergedDestinationRules != 1 {
		t.Errorf("counts = %+v", s.Counts)
	}
	// The subset of a selector rule is precomputed like any other.
	ord := pc.services.byHost[reviews]
	entry := pc.endpoints.slots[ord].entry.Load()
	if len(entry.subsets) != 1 || entry.subsets[0].key != "version=v9" {
		t.Errorf("precomputed subsets = %+v, want version=v9", entry.subsets)
	}
	if got := addresses(pc.Endpoints(reviews, 80, version("v9"))); !cmp.Equal(got, []string{"10.0.0.2"}) {
		t.Errorf("subset endpoints = %v", got)
	}
}
