package pushcontext

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

var (
	reviews = hostname("bookinfo", "reviews")
	ratings = hostname("bookinfo", "ratings")
)

func dr(host string, exportTo ...string) *networking.DestinationRule {
	return &networking.DestinationRule{Host: host, ExportTo: exportTo}
}

func TestDestinationRuleFor(t *testing.T) {
	type lookup struct {
		proxyNs, host string
		want          []string // From of the resolved rule; nil for none
	}
	tests := []struct {
		name    string
		configs []*model.Config
		lookups []lookup
	}{
		{
			name:    "no rules",
			lookups: []lookup{{"bookinfo", reviews, nil}},
		},
		{
			name:    "public rule in the service namespace is seen everywhere",
			configs: []*model.Config{ruleConfig("bookinfo", "reviews", 0, dr(reviews))},
			lookups: []lookup{
				{"bookinfo", reviews, []string{"bookinfo/reviews"}},
				{"frontend", reviews, []string{"bookinfo/reviews"}},
				{"frontend", ratings, nil},
			},
		},
		{
			name:    "dot keeps a rule to its own namespace",
			configs: []*model.Config{ruleConfig("bookinfo", "reviews", 0, dr(reviews, "."))},
			lookups: []lookup{
				{"bookinfo", reviews, []string{"bookinfo/reviews"}},
				{"frontend", reviews, nil},
			},
		},
		{
			// As in Istio, "~" exports a rule to no namespace, its own
			// included.
			name:    "tilde exports to no namespace",
			configs: []*model.Config{ruleConfig("bookinfo", "reviews", 0, dr(reviews, "~"))},
			lookups: []lookup{
				{"bookinfo", reviews, nil},
				{"frontend", reviews, nil},
			},
		},
		{
			name: "named exportTo, then the root namespace for everyone else",
			configs: []*model.Config{
				ruleConfig("bookinfo", "to-frontend", 0, dr(reviews, "frontend")),
				ruleConfig("istio-system", "mesh-default", 1, dr("*")),
			},
			lookups: []lookup{
				{"frontend", reviews, []string{"bookinfo/to-frontend"}},
				{"backend", reviews, []string{"istio-system/mesh-default"}},
				{"backend", "api.example.com", []string{"istio-system/mesh-default"}},
			},
		},
		{
			name: "proxy namespace beats service namespace beats root",
			configs: []*model.Config{
				ruleConfig("istio-system", "root", 0, dr(reviews)),
				ruleConfig("bookinfo", "service-ns", 1, dr(reviews)),
				ruleConfig("frontend", "proxy-ns", 2, dr(reviews, ".")),
			},
			lookups: []lookup{
				{"frontend", reviews, []string{"frontend/proxy-ns"}},
				{"backend", reviews, []string{"bookinfo/service-ns"}},
				{"bookinfo", reviews, []string{"bookinfo/service-ns"}},
			},
		},
		{
			// Istio looks first at the rules of the proxy's namespace that
			// are exported to it: none, ".", "*" or its name.
			name: "a rule in the proxy namespace is seen there only if exported to it",
			configs: []*model.Config{
				ruleConfig("bookinfo", "service-ns", 0, dr(reviews)),
				ruleConfig("frontend", "exported-elsewhere", 1, dr(reviews, "backend")),
				ruleConfig("frontend", "wildcard", 2, dr("*.bookinfo.svc.cluster.local")),
				ruleConfig("frontend", "named-too", 3, dr(ratings, "backend", "frontend")),
			},
			lookups: []lookup{
				// The exact rule is not frontend's: its wildcard is next.
				{"frontend", reviews, []string{"frontend/wildcard"}},
				{"frontend", ratings, []string{"frontend/named-too"}},
				// Another namespace's rules are not looked at, exportTo or not.
				{"backend", reviews, []string{"bookinfo/service-ns"}},
			},
		},
		{
			name: "a rule exported only elsewhere leaves its namespace to the service's rules",
			configs: []*model.Config{
				ruleConfig("bookinfo", "service-ns", 0, dr(reviews)),
				ruleConfig("frontend", "exported-elsewhere", 1, dr(reviews, "backend")),
			},
			lookups: []lookup{
				{"frontend", reviews, []string{"bookinfo/service-ns"}},
			},
		},
		{
			name: "exact beats wildcard, longest wildcard wins",
			configs: []*model.Config{
				ruleConfig("bookinfo", "all-svc", 0, dr("*.svc.cluster.local")),
				ruleConfig("bookinfo", "bookinfo-wild", 1, dr("*.bookinfo.svc.cluster.local")),
				ruleConfig("bookinfo", "reviews-exact", 2, dr(reviews)),
				ruleConfig("bookinfo", "star", 3, dr("*")),
			},
			lookups: []lookup{
				{"frontend", reviews, []string{"bookinfo/reviews-exact"}},
				{"frontend", ratings, []string{"bookinfo/bookinfo-wild"}},
				{"bookinfo", "other.ns.svc.cluster.local", []string{"bookinfo/all-svc"}},
				{"bookinfo", "api.example.com", []string{"bookinfo/star"}},
				{"frontend", "api.example.com", nil}, // rules of bookinfo are not for other services
			},
		},
		{
			name: "a wildcard does not match its bare suffix",
			configs: []*model.Config{
				ruleConfig("istio-system", "wild", 0, dr("*.example.com")),
			},
			lookups: []lookup{
				{"frontend", "a.example.com", []string{"istio-system/wild"}},
				{"frontend", "example.com", nil},
			},
		},
		{
			name: "short host resolves in the rule's namespace",
			configs: []*model.Config{
				ruleConfig("bookinfo", "short", 0, dr("reviews")),
				ruleConfig("frontend", "short-elsewhere", 1, dr("ratings")),
			},
			lookups: []lookup{
				{"frontend", reviews, []string{"bookinfo/short"}},
				{"frontend", ratings, nil}, // "ratings" in frontend means ratings.frontend
			},
		},
		{
			// Istio's order for a root-namespace proxy: the root namespace's
			// private rules, then the service namespace's exported rules,
			// then the root namespace's exported rules.
			name: "proxies in the root namespace: private root rules, then the service namespace, then public root rules",
			configs: []*model.Config{
				ruleConfig("istio-system", "root-private", 0, dr(reviews, ".")),
				ruleConfig("istio-system", "root-catch-all", 1, dr("*")),
				ruleConfig("bookinfo", "service-ns", 2, dr(reviews)),
				ruleConfig("bookinfo", "service-ns-ratings", 3, dr(ratings)),
			},
			lookups: []lookup{
				{"istio-system", reviews, []string{"istio-system/root-private"}},
				{"istio-system", ratings, []string{"bookinfo/service-ns-ratings"}},
				{"istio-system", "api.example.com", []string{"istio-system/root-catch-all"}},
				{"frontend", reviews, []string{"bookinfo/service-ns"}},
			},
		},
		{
			name: "a private root wildcard beats a more specific public root rule for root-namespace proxies",
			configs: []*model.Config{
				ruleConfig("istio-system", "root-private-wildcard", 0, dr("*.bookinfo.svc.cluster.local", "istio-system")),
				ruleConfig("istio-system", "root-public-reviews", 1, dr(reviews)),
			},
			lookups: []lookup{
				{"istio-system", reviews, []string{"istio-system/root-private-wildcard"}},
				{"frontend", reviews, []string{"istio-system/root-public-reviews"}},
			},
		},
		{
			name: "a root rule exported only elsewhere is not for root-namespace proxies",
			configs: []*model.Config{
				ruleConfig("istio-system", "root-to-frontend", 0, dr(reviews, "frontend")),
			},
			lookups: []lookup{
				{"istio-system", reviews, nil},
				{"frontend", reviews, []string{"istio-system/root-to-frontend"}},
			},
		},
		{
			name: "root private rules merge only with each other",
			configs: []*model.Config{
				ruleConfig("istio-system", "root-private", 0, dr(reviews, ".")),
				ruleConfig("istio-system", "root-and-frontend", 1, dr(reviews, ".", "frontend")),
			},
			lookups: []lookup{
				{"istio-system", reviews, []string{"istio-system/root-private"}},
				{"frontend", reviews, []string{"istio-system/root-and-frontend"}},
			},
		},
		{
			name: "rules with a workload selector are not in the selector-less lookup",
			configs: []*model.Config{
				ruleConfig("bookinfo", "selector", 0, &networking.DestinationRule{
					Host:             reviews,
					WorkloadSelector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "x"}},
				}),
			},
			lookups: []lookup{{"bookinfo", reviews, nil}},
		},
		{
			name: "rules for one host merge oldest first",
			configs: []*model.Config{
				ruleConfig("bookinfo", "newer", 5, dr(reviews)),
				ruleConfig("bookinfo", "older", 1, dr(reviews)),
			},
			lookups: []lookup{
				{"bookinfo", reviews, []string{"bookinfo/older", "bookinfo/newer"}},
				{"frontend", reviews, []string{"bookinfo/older", "bookinfo/newer"}},
			},
		},
		{
			name: "rules whose exportTo differ stay apart; a wider one also joins narrower ones",
			configs: []*model.Config{
				ruleConfig("bookinfo", "to-a", 0, dr(reviews, "a")),
				ruleConfig("bookinfo", "to-a-b", 1, dr(reviews, "a", "b")),
				ruleConfig("bookinfo", "to-c", 2, dr(reviews, "c")),
			},
			lookups: []lookup{
				{"a", reviews, []string{"bookinfo/to-a", "bookinfo/to-a-b"}},
				{"b", reviews, []string{"bookinfo/to-a-b"}},
				{"c", reviews, []string{"bookinfo/to-c"}},
				{"d", reviews, nil},
				// None is exported to bookinfo itself.
				{"bookinfo", reviews, nil},
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
				got := pc.DestinationRuleFor(l.proxyNs, l.host)
				if diff := cmp.Diff(l.want, fromNames(got)); diff != "" {
					t.Errorf("DestinationRuleFor(%q, %q) From (-want +got):\n%s", l.proxyNs, l.host, diff)
				}
				if got != nil && !strings.HasPrefix(got.Spec.Host, "*") && got.Spec.Host != l.host {
					t.Errorf("DestinationRuleFor(%q, %q).Spec.Host = %q, want the resolved host", l.proxyNs, l.host, got.Spec.Host)
				}
			}
		})
	}
}

func TestDestinationRuleMerge(t *testing.T) {
	lbRoundRobin := &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
		LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_ROUND_ROBIN},
	}}
	lbLeastRequest := &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
		LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_LEAST_REQUEST},
	}}
	tests := []struct {
		name         string
		specs        []*networking.DestinationRule // oldest first, all in bookinfo
		wantSubsets  []string
		wantPolicy   *networking.TrafficPolicy
		wantProblems []string // names of rules with a dropped subset
	}{
		{
			name: "subsets appended, duplicate dropped and reported",
			specs: []*networking.DestinationRule{
				{Host: reviews, Subsets: []*networking.Subset{subset("v1", version("v1")), subset("v2", version("v2"))}},
				{Host: reviews, Subsets: []*networking.Subset{subset("v2", version("other")), subset("v3", version("v3"))}},
			},
			wantSubsets:  []string{"v1", "v2", "v3"},
			wantProblems: []string{"rule-1"},
		},
		{
			name: "oldest traffic policy wins",
			specs: []*networking.DestinationRule{
				{Host: reviews, TrafficPolicy: lbRoundRobin},
				{Host: reviews, TrafficPolicy: lbLeastRequest},
			},
			wantPolicy: lbRoundRobin,
		},
		{
			name: "oldest non-nil traffic policy wins",
			specs: []*networking.DestinationRule{
				{Host: reviews, Subsets: []*networking.Subset{subset("v1", version("v1"))}},
				{Host: reviews, TrafficPolicy: lbLeastRequest},
				{Host: reviews, TrafficPolicy: lbRoundRobin},
			},
			wantSubsets: []string{"v1"},
			wantPolicy:  lbLeastRequest,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := model.NewStore()
			store.UpsertService(newService("bookinfo", "reviews", nil))
			var originals []*networking.DestinationRule
			for i, spec := range tt.specs {
				originals = append(originals, proto.Clone(spec).(*networking.DestinationRule))
				store.UpsertConfig(ruleConfig("bookinfo", "rule-"+string(rune('0'+i)), i, spec))
			}
			pc := Build(store, testOpts, nil, nil)
			for _, proxyNs := range []string{"bookinfo", "frontend"} {
				got := pc.DestinationRuleFor(proxyNs, reviews)
				if got == nil {
					t.Fatalf("no rule for %s from %s", reviews, proxyNs)
				}
				if diff := cmp.Diff(tt.wantSubsets, subsetNames(got)); diff != "" {
					t.Errorf("%s: subsets (-want +got):\n%s", proxyNs, diff)
				}
				if got.Spec.TrafficPolicy != tt.wantPolicy {
					t.Errorf("%s: traffic policy = %v, want %v", proxyNs, got.Spec.TrafficPolicy, tt.wantPolicy)
				}
				if len(got.From) != len(tt.specs) {
					t.Errorf("%s: From = %v, want all %d rules", proxyNs, got.From, len(tt.specs))
				}
			}
			for i, spec := range tt.specs {
				if !proto.Equal(spec, originals[i]) {
					t.Errorf("merging mutated rule-%d: got %v, was %v", i, spec, originals[i])
				}
			}
			var dropped []string
			for _, p := range pc.Summary().Problems {
				if p.Kind == "DestinationRule" {
					dropped = append(dropped, p.Name)
				}
			}
			if diff := cmp.Diff(tt.wantProblems, dropped); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}
