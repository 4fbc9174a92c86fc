package pushcontext

import (
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func tunnel(host string) *networking.TrafficPolicy {
	return &networking.TrafficPolicy{Tunnel: &networking.TrafficPolicy_TunnelSettings{Protocol: "CONNECT", TargetHost: host, TargetPort: 8443}}
}

// withLocality is ratings' base rule with policy changes applied to its
// traffic policy.
func withLocality(edit func(*networking.TrafficPolicy)) *networking.DestinationRule {
	r := plainRule(ratings, networking.LoadBalancerSettings_RANDOM)
	edit(r.TrafficPolicy)
	return r
}

func failover(from, to string) *networking.LocalityLoadBalancerSetting {
	return &networking.LocalityLoadBalancerSetting{Failover: []*networking.LocalityLoadBalancerSetting_Failover{{From: from, To: to}}}
}

func outliers(errors uint32) *networking.OutlierDetection {
	return &networking.OutlierDetection{Consecutive_5XxErrors: wrapperspb.UInt32(errors)}
}

func TestRuleChanges(t *testing.T) {
	details := hostname("bookinfo", "details")
	twoSubsets := func() []*networking.Subset {
		return []*networking.Subset{subset("v1", version("v1")), subset("v2", version("v2"))}
	}
	// base is the store before each change: reviews has a public rule with
	// two subsets, ratings a rule with only a traffic policy.
	base := func() model.Store {
		store := model.NewStore()
		for _, name := range []string{"reviews", "ratings", "details"} {
			store.UpsertService(newService("bookinfo", name, nil))
		}
		store.UpsertConfig(ruleConfig("bookinfo", "reviews", 0, &networking.DestinationRule{Host: "reviews", Subsets: twoSubsets()}))
		store.UpsertConfig(ruleConfig("bookinfo", "ratings", 1, plainRule(ratings, networking.LoadBalancerSettings_RANDOM)))
		return store
	}
	drKey := func(ns, name string) model.ConfigKey { return key(model.KindDestinationRule, ns, name) }
	none := RuleChange{}
	tests := []struct {
		name string
		// seed, if set, changes base before the first snapshot.
		seed   func(model.Store)
		change func(model.Store) *model.PushRequest
		want   map[string]RuleChange
	}{
		{
			name: "subset labels changed",
			change: func(s model.Store) *model.PushRequest {
				s.UpsertConfig(ruleConfig("bookinfo", "reviews", 0, &networking.DestinationRule{Host: "reviews",
					Subsets: []*networking.Subset{subset("v1", version("v1")), subset("v2", version("v2-new"))}}))
				return pushRequest(drKey("bookinfo", "reviews"))
			},
			want: map[string]RuleChange{reviews: {SubsetsChanged: true}},
		},
		{
			name: "only the traffic policy changed",
			change: func(s model.Store) *model.PushRequest {
				s.UpsertConfig(ruleConfig("bookinfo", "ratings", 1, plainRule(ratings, networking.LoadBalancerSettings_LEAST_REQUEST)))
				return pushRequest(drKey("bookinfo", "ratings"))
			},
			want: map[string]RuleChange{ratings: none},
		},
		{
			name: "locality failover added",
			change: func(s model.Store) *model.PushRequest {
				s.UpsertConfig(ruleConfig("bookinfo", "ratings", 1, withLocality(func(tp *networking.TrafficPolicy) {
					tp.LoadBalancer.LocalityLbSetting = failover("us-east", "us-west")
				})))
				return pushRequest(drKey("bookinfo", "ratings"))
			},
			want: map[string]RuleChange{ratings: {LocalityChanged: true}},
		},
		{
			// Locality load balancing is on by default: outlier detection
			// alone turns on failover priorities.
			name: "outlier detection added",
			change: func(s model.Store) *model.PushRequest {
				s.UpsertConfig(ruleConfig("bookinfo", "ratings", 1, withLocality(func(tp *networking.TrafficPolicy) {
					tp.OutlierDetection = outliers(5)
				})))
				return pushRequest(drKey("bookinfo", "ratings"))
			},
			want: map[string]RuleChange{ratings: {LocalityChanged: true}},
		},
		{
			name: "a port's locality distribution added",
			change: func(s model.Store) *model.PushRequest {
				s.UpsertConfig(ruleConfig("bookinfo", "ratings", 1, withLocality(func(tp *networking.TrafficPolicy) {
					tp.PortLevelSettings = []*networking.TrafficPolicy_PortTrafficPolicy{{
						Port: &networking.PortSelector{Number: 9080},
						LoadBalancer: &networking.LoadBalancerSettings{LocalityLbSetting: &networking.LocalityLoadBalancerSetting{
							Distribute: []*networking.LocalityLoadBalancerSetting_Distribute{{From: "*", To: map[string]uint32{"us-east/*": 100}}},
						}},
					}}
				})))
				return pushRequest(drKey("bookinfo", "ratings"))
			},
			want: map[string]RuleChange{ratings: {LocalityChanged: true}},
		},
		{
			name: "a subset's outlier detection added",
			change: func(s model.Store) *model.PushRequest {
				subsets := twoSubsets()
				subsets[0].TrafficPolicy = &networking.TrafficPolicy{OutlierDetection: outliers(3)}
				s.UpsertConfig(ruleConfig("bookinfo", "reviews", 0, &networking.DestinationRule{Host: "reviews", Subsets: subsets}))
				return pushRequest(drKey("bookinfo", "reviews"))
			},
			want: map[string]RuleChange{reviews: {LocalityChanged: true}},
		},
		{
			// Load assignments read only whether outlier detection is set.
			name: "outlier thresholds tuned",
			seed: func(s model.Store) {
				s.UpsertConfig(ruleConfig("bookinfo", "ratings", 1, withLocality(func(tp *networking.TrafficPolicy) {
					tp.OutlierDetection = outliers(5)
				})))
			},
			change: func(s model.Store) *model.PushRequest {
				s.UpsertConfig(ruleConfig("bookinfo", "ratings", 1, withLocality(func(tp *networking.TrafficPolicy) {
					tp.OutlierDetection = outliers(7)
				})))
				return pushRequest(drKey("bookinfo", "ratings"))
			},
			want: map[string]RuleChange{ratings: none},
		},
		{
			name: "tunnel added",
			change: func(s model.Store) *model.PushRequest {
				s.UpsertConfig(ruleConfig("bookinfo", "ratings", 1, &networking.DestinationRule{Host: ratings, TrafficPolicy: tunnel("proxy.example")}))
				return pushRequest(drKey("bookinfo", "ratings"))
			},
			want: map[string]RuleChange{ratings: {TunnelChanged: true}},
		},
		{
			name: "a subset's own tunnel changed",
			change: func(s model.Store) *model.PushRequest {
				subsets := twoSubsets()
				subsets[1].TrafficPolicy = tunnel("egress.example")
				s.UpsertConfig(ruleConfig("bookinfo", "reviews", 0, &networking.DestinationRule{Host: "reviews", Subsets: subsets}))
				return pushRequest(drKey("bookinfo", "reviews"))
			},
			want: map[string]RuleChange{reviews: {TunnelChanged: true}},
		},
		{
			name: "rule deleted",
			change: func(s model.Store) *model.PushRequest {
				s.DeleteConfig(drKey("bookinfo", "reviews"))
				return pushRequest(drKey("bookinfo", "reviews"))
			},
			want: map[string]RuleChange{reviews: {SubsetsChanged: true}},
		},
		{
			name: "a rule merged into another changes the merged entry",
			change: func(s model.Store) *model.PushRequest {
				s.UpsertConfig(ruleConfig("bookinfo", "reviews-more", 5, &networking.DestinationRule{Host: reviews,
					Subsets: []*networking.Subset{subset("v3", version("v3"))}}))
				return pushRequest(drKey("bookinfo", "reviews-more"))
			},
			want: map[string]RuleChange{reviews: {SubsetsChanged: true}},
		},
		{
			name: "a wildcard rule touches every service it matches",
			change: func(s model.Store) *model.PushRequest {
				s.UpsertConfig(ruleConfig("istio-system", "mesh", 9, &networking.DestinationRule{Host: "*.bookinfo.svc.cluster.local",
					Subsets: []*networking.Subset{subset("canary", map[string]string{"track": "canary"})}}))
				return pushRequest(drKey("istio-system", "mesh"))
			},
			// reviews and ratings have rules of their own that shadow it
			// everywhere; only details sees the new subset.
			want: map[string]RuleChange{reviews: none, ratings: none, details: {SubsetsChanged: true}},
		},
		{
			// Routes read a destination's rule (its consistent hash) whether
			// or not a Service has the host.
			name: "a wildcard rule touches the hosts routes lead to that no service has",
			seed: func(s model.Store) {
				s.UpsertConfig(vsConfig("bookinfo", "to-gone", 0, &networking.VirtualService{Hosts: []string{"details"},
					Http: []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "gone"}}}}}}))
			},
			change: func(s model.Store) *model.PushRequest {
				s.UpsertConfig(ruleConfig("istio-system", "mesh", 9, &networking.DestinationRule{Host: "*.bookinfo.svc.cluster.local",
					Subsets: []*networking.Subset{subset("canary", map[string]string{"track": "canary"})}}))
				return pushRequest(drKey("istio-system", "mesh"))
			},
			want: map[string]RuleChange{reviews: none, ratings: none, details: {SubsetsChanged: true},
				hostname("bookinfo", "gone"): {SubsetsChanged: true}},
		},
		{
			name: "narrowing exportTo changes what other namespaces see",
			change: func(s model.Store) *model.PushRequest {
				s.UpsertConfig(ruleConfig("bookinfo", "reviews", 0, &networking.DestinationRule{Host: "reviews", Subsets: twoSubsets(), ExportTo: []string{"."}}))
				return pushRequest(drKey("bookinfo", "reviews"))
			},
			want: map[string]RuleChange{reviews: {SubsetsChanged: true}},
		},
		{
			name: "namespaces without rules of their own are compared too",
			change: func(s model.Store) *model.PushRequest {
				s.UpsertConfig(ruleConfig("bookinfo", "reviews", 0, &networking.DestinationRule{Host: "reviews", Subsets: twoSubsets(), ExportTo: []string{"."}}))
				s.UpsertConfig(ruleConfig("istio-system", "root-private", 5, &networking.DestinationRule{Host: "*", Subsets: twoSubsets(), ExportTo: []string{"."}}))
				return pushRequest(drKey("bookinfo", "reviews"), drKey("istio-system", "root-private"))
			},
			// Proxies in bookinfo and istio-system still see v1 and v2 for
			// reviews; proxies anywhere else lost them. Proxies in
			// istio-system look at its private rules first, so they now
			// see v1 and v2 for ratings too.
			want: map[string]RuleChange{reviews: {SubsetsChanged: true}, ratings: {SubsetsChanged: true}, details: {SubsetsChanged: true}},
		},
		{
			name: "a rule in a proxy namespace with the same subsets changes nothing for subsets",
			change: func(s model.Store) *model.PushRequest {
				s.UpsertConfig(ruleConfig("frontend", "reviews", 3, &networking.DestinationRule{Host: reviews, Subsets: twoSubsets()}))
				return pushRequest(drKey("frontend", "reviews"))
			},
			want: map[string]RuleChange{reviews: none},
		},
		{
			name: "a selector rule that only sets a policy keeps the parent's subsets",
			change: func(s model.Store) *model.PushRequest {
				s.UpsertConfig(ruleConfig("bookinfo", "for-web", 3, selectorRule(reviews, app("web"), networking.LoadBalancerSettings_RANDOM)))
				return pushRequest(drKey("bookinfo", "for-web"))
			},
			want: map[string]RuleChange{reviews: none},
		},
		{
			name: "a selector rule with its own subset",
			change: func(s model.Store) *model.PushRequest {
				s.UpsertConfig(ruleConfig("frontend", "for-web", 3, selectorRule(reviews, app("web"), 0, subset("v1", version("v1")))))
				return pushRequest(drKey("frontend", "for-web"))
			},
			want: map[string]RuleChange{reviews: {SubsetsChanged: true}},
		},
		{
			name: "a service change is all-changed, added or deleted",
			change: func(s model.Store) *model.PushRequest {
				s.DeleteService(model.NamespacedName{Namespace: "bookinfo", Name: "details"})
				s.UpsertService(newService("bookinfo", "extra", nil))
				return pushRequest(key(model.KindService, "bookinfo", "details"), key(model.KindService, "bookinfo", "extra"))
			},
			want: map[string]RuleChange{details: allChanged, hostname("bookinfo", "extra"): allChanged},
		},
		{
			// The store is read after a later write than the request's:
			// the snapshot holds that change too, and its own push, once
			// announced, finds it already there. It must be told now.
			name: "a rule the build read before its change was announced",
			change: func(s model.Store) *model.PushRequest {
				s.UpsertConfig(ruleConfig("bookinfo", "ratings", 1, plainRule(ratings, networking.LoadBalancerSettings_LEAST_REQUEST)))
				s.UpsertConfig(ruleConfig("bookinfo", "reviews", 0, &networking.DestinationRule{Host: "reviews",
					Subsets: []*networking.Subset{subset("v1", version("v1")), subset("v2", version("v2-new"))}}))
				return pushRequest(drKey("bookinfo", "ratings"))
			},
			want: map[string]RuleChange{ratings: none, reviews: {SubsetsChanged: true}},
		},
		{
			name: "rules added and deleted before their changes were announced",
			change: func(s model.Store) *model.PushRequest {
				s.UpsertConfig(ruleConfig("bookinfo", "ratings", 1, plainRule(ratings, networking.LoadBalancerSettings_LEAST_REQUEST)))
				s.DeleteConfig(drKey("bookinfo", "reviews"))
				s.UpsertConfig(ruleConfig("bookinfo", "new", 2, &networking.DestinationRule{Host: "details", Subsets: twoSubsets()}))
				return pushRequest(drKey("bookinfo", "ratings"))
			},
			want: map[string]RuleChange{ratings: none, reviews: {SubsetsChanged: true}, details: {SubsetsChanged: true}},
		},
		{
			name: "endpoints and unrelated rules touch nothing",
			change: func(s model.Store) *model.PushRequest {
				return pushRequest(key(model.KindEndpoints, "bookinfo", "reviews"), drKey("bookinfo", "never-existed"))
			},
			want: map[string]RuleChange{},
		},
		{
			name: "a forced push changes every host",
			change: func(model.Store) *model.PushRequest {
				return &model.PushRequest{Full: true}
			},
			want: map[string]RuleChange{reviews: allChanged, ratings: allChanged, details: allChanged},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := base()
			if tt.seed != nil {
				tt.seed(store)
			}
			prev := Build(store, testOpts, nil, nil)
			req := tt.change(store)
			pc := Build(store, testOpts, prev, req)
			got := pc.RuleChanges(prev, req)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("RuleChanges (-want +got):\n%s", diff)
			}
			if again := pc.RuleChanges(prev, req); reflect.ValueOf(again).Pointer() != reflect.ValueOf(got).Pointer() {
				t.Error("a repeated question was answered anew")
			}
		})
	}
}

func TestRuleChangesWithoutPrev(t *testing.T) {
	store := model.NewStore()
	store.UpsertService(newService("bookinfo", "reviews", nil))
	store.UpsertConfig(ruleConfig("bookinfo", "external", 0, dr("api.example.com")))
	pc := Build(store, testOpts, nil, nil)
	want := map[string]RuleChange{reviews: allChanged, "api.example.com": allChanged}
	if diff := cmp.Diff(want, pc.RuleChanges(nil, pushRequest(key(model.KindDestinationRule, "bookinfo", "external")))); diff != "" {
		t.Errorf("RuleChanges (-want +got):\n%s", diff)
	}
}
