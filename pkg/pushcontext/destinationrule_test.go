package pushcontext

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func simpleLB(p networking.LoadBalancerSettings_SimpleLB) *networking.LoadBalancerSettings {
	return &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: p}}
}

func maxConnections(n int32) *networking.ConnectionPoolSettings {
	return &networking.ConnectionPoolSettings{Tcp: &networking.ConnectionPoolSettings_TCPSettings{MaxConnections: n}}
}

func portSelector(n uint32) *networking.PortSelector { return &networking.PortSelector{Number: n} }

func TestTrafficPolicy(t *testing.T) {
	var (
		topLB      = simpleLB(networking.LoadBalancerSettings_ROUND_ROBIN)
		topPool    = maxConnections(100)
		topOutlier = &networking.OutlierDetection{MaxEjectionPercent: 10}
		topTLS     = &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE}
		portLB     = simpleLB(networking.LoadBalancerSettings_LEAST_REQUEST)
		v1LB       = simpleLB(networking.LoadBalancerSettings_RANDOM)
		v2Outlier  = &networking.OutlierDetection{MaxEjectionPercent: 50}
		v2PortPool = maxConnections(7)
		v4Outlier  = &networking.OutlierDetection{MaxEjectionPercent: 70}
		v4PortLB   = simpleLB(networking.LoadBalancerSettings_LEAST_REQUEST)
		v4Budget   = &networking.TrafficPolicy_RetryBudget{Percent: &wrapperspb.DoubleValue{Value: 20}}
		tunnel     = &networking.TrafficPolicy_TunnelSettings{Protocol: "CONNECT", TargetHost: "x", TargetPort: 1}
	)
	v4 := &networking.Subset{Name: "v4", Labels: version("v4"), TrafficPolicy: &networking.TrafficPolicy{
		OutlierDetection: v4Outlier,
		RetryBudget:      v4Budget,
		PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{
			{Port: portSelector(8080), LoadBalancer: v4PortLB},
		},
	}}
	full := &networking.DestinationRule{
		Host: reviews,
		TrafficPolicy: &networking.TrafficPolicy{
			LoadBalancer:     topLB,
			ConnectionPool:   topPool,
			OutlierDetection: topOutlier,
			Tls:              topTLS,
			Tunnel:           tunnel,
			PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{
				{Port: portSelector(9080), LoadBalancer: portLB},
			},
		},
		Subsets: []*networking.Subset{
			{Name: "v1", Labels: version("v1"), TrafficPolicy: &networking.TrafficPolicy{LoadBalancer: v1LB}},
			{Name: "v2", Labels: version("v2"), TrafficPolicy: &networking.TrafficPolicy{
				OutlierDetection: v2Outlier,
				PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{
					{Port: portSelector(9080), ConnectionPool: v2PortPool},
				},
			}},
			{Name: "v3", Labels: version("v3")},
			v4,
		},
	}
	subsetOnly := &networking.DestinationRule{
		Host: reviews,
		Subsets: []*networking.Subset{
			{Name: "v1", TrafficPolicy: &networking.TrafficPolicy{LoadBalancer: v1LB}},
			v4,
		},
	}
	tests := []struct {
		name   string
		spec   *networking.DestinationRule
		port   uint32
		subset string
		want   *networking.TrafficPolicy
	}{
		{
			name: "top level only",
			spec: full, port: 80,
			want: &networking.TrafficPolicy{LoadBalancer: topLB, ConnectionPool: topPool, OutlierDetection: topOutlier, Tls: topTLS, Tunnel: tunnel},
		},
		{
			name: "port level replaces the four fields without inheriting",
			spec: full, port: 9080,
			want: &networking.TrafficPolicy{LoadBalancer: portLB, Tunnel: tunnel},
		},
		{
			name: "subset over top level",
			spec: full, port: 80, subset: "v1",
			want: &networking.TrafficPolicy{LoadBalancer: v1LB, ConnectionPool: topPool, OutlierDetection: topOutlier, Tls: topTLS, Tunnel: tunnel},
		},
		{
			name: "subset over port level",
			spec: full, port: 9080, subset: "v1",
			want: &networking.TrafficPolicy{LoadBalancer: v1LB, Tunnel: tunnel},
		},
		{
			name: "subset without its port entry",
			spec: full, port: 80, subset: "v2",
			want: &networking.TrafficPolicy{LoadBalancer: topLB, ConnectionPool: topPool, OutlierDetection: v2Outlier, Tls: topTLS, Tunnel: tunnel},
		},
		{
			// Istio's MergeSubsetTrafficPolicy: a subset's port entry replaces
			// the four port-level fields as a whole, so the top level's
			// port-level load balancer is reset too.
			name: "subset port entry replaces the top level's port entry as a whole",
			spec: full, port: 9080, subset: "v2",
			want: &networking.TrafficPolicy{ConnectionPool: v2PortPool, Tunnel: tunnel},
		},
		{
			name: "subset port entry resets the top level's fields it leaves unset",
			spec: full, port: 8080, subset: "v4",
			want: &networking.TrafficPolicy{LoadBalancer: v4PortLB, Tunnel: tunnel, RetryBudget: v4Budget},
		},
		{
			name: "subset without an entry for the port layers field by field",
			spec: full, port: 80, subset: "v4",
			want: &networking.TrafficPolicy{LoadBalancer: topLB, ConnectionPool: topPool, OutlierDetection: v4Outlier, Tls: topTLS, Tunnel: tunnel, RetryBudget: v4Budget},
		},
		{
			name: "subset port entry without a top level",
			spec: subsetOnly, port: 8080, subset: "v4",
			want: &networking.TrafficPolicy{LoadBalancer: v4PortLB, RetryBudget: v4Budget},
		},
		{
			name: "subset without a policy",
			spec: full, port: 80, subset: "v3",
			want: &networking.TrafficPolicy{LoadBalancer: topLB, ConnectionPool: topPool, OutlierDetection: topOutlier, Tls: topTLS, Tunnel: tunnel},
		},
		{
			name: "unknown subset falls back to the top level",
			spec: full, port: 9080, subset: "nope",
			want: &networking.TrafficPolicy{LoadBalancer: portLB, Tunnel: tunnel},
		},
		{
			name: "subset policy without a top level",
			spec: subsetOnly, port: 80, subset: "v1",
			want: &networking.TrafficPolicy{LoadBalancer: v1LB},
		},
		{
			name: "nothing applies",
			spec: subsetOnly, port: 80,
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := proto.Clone(tt.spec)
			rule := &DestinationRule{Spec: tt.spec}
			got := rule.TrafficPolicy(tt.port, tt.subset)
			if !proto.Equal(got, tt.want) {
				t.Errorf("TrafficPolicy(%d, %q) =\n%v\nwant\n%v", tt.port, tt.subset, got, tt.want)
			}
			if got != nil && len(got.PortLevelSettings) != 0 {
				t.Errorf("result keeps port level settings: %v", got.PortLevelSettings)
			}
			if !proto.Equal(tt.spec, before) {
				t.Errorf("TrafficPolicy mutated the spec:\n%v\nwas\n%v", tt.spec, before)
			}
		})
	}
}

func TestTrafficPolicySharesUnchangedPolicy(t *testing.T) {
	top := &networking.TrafficPolicy{LoadBalancer: simpleLB(networking.LoadBalancerSettings_ROUND_ROBIN)}
	rule := &DestinationRule{Spec: &networking.DestinationRule{Host: reviews, TrafficPolicy: top}}
	if got := rule.TrafficPolicy(80, ""); got != top {
		t.Errorf("a policy without port-level settings should be returned as is, got a copy")
	}
	if got := testing.AllocsPerRun(100, func() { _ = rule.TrafficPolicy(80, "") }); got != 0 {
		t.Errorf("TrafficPolicy allocates %v times when nothing needs layering", got)
	}
}

func TestSubset(t *testing.T) {
	rule := &DestinationRule{Spec: &networking.DestinationRule{Subsets: []*networking.Subset{subset("v1", version("v1"))}}}
	if got := rule.Subset("v1"); got == nil || got.Name != "v1" {
		t.Errorf("Subset(v1) = %v", got)
	}
	if got := rule.Subset("v2"); got != nil {
		t.Errorf("Subset(v2) = %v, want nil", got)
	}
	var none *DestinationRule
	if none.Subset("v1") != nil || none.TrafficPolicy(80, "v1") != nil {
		t.Error("nil rule should resolve nothing")
	}
}

// Only a rule that may send a host's clusters to original destinations
// makes them depend on whether every endpoint takes mutual TLS; whichever
// namespace the rule is in, whatever it exports, and wherever in it
// PASSTHROUGH is set.
func TestMayPassThrough(t *testing.T) {
	passthrough := simpleLB(networking.LoadBalancerSettings_PASSTHROUGH)
	top := &networking.TrafficPolicy{LoadBalancer: passthrough}
	tests := []struct {
		name string
		ns   string
		spec *networking.DestinationRule
		want bool
	}{
		{name: "no rule", want: false},
		{name: "round robin", ns: "app", spec: &networking.DestinationRule{Host: "web",
			TrafficPolicy: &networking.TrafficPolicy{LoadBalancer: simpleLB(networking.LoadBalancerSettings_ROUND_ROBIN)}}, want: false},
		{name: "top level, short host", ns: "app", spec: &networking.DestinationRule{Host: "web", TrafficPolicy: top}, want: true},
		{name: "short host of another namespace", ns: "other", spec: &networking.DestinationRule{Host: "web", TrafficPolicy: top}, want: false},
		{name: "private rule of another namespace", ns: "other", spec: &networking.DestinationRule{
			Host: hostname("app", "web"), ExportTo: []string{"."}, TrafficPolicy: top}, want: true},
		{name: "port level", ns: "app", spec: &networking.DestinationRule{Host: "web", TrafficPolicy: &networking.TrafficPolicy{
			PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{{Port: portSelector(80), LoadBalancer: passthrough}}}}, want: true},
		{name: "subset", ns: "app", spec: &networking.DestinationRule{Host: "web",
			Subsets: []*networking.Subset{{Name: "direct", Labels: version("v1"), TrafficPolicy: top}}}, want: true},
		{name: "wildcard", ns: "app", spec: &networking.DestinationRule{Host: "*.app.svc.cluster.local", TrafficPolicy: top}, want: true},
		{name: "wildcard of another domain", ns: "app", spec: &networking.DestinationRule{Host: "*.example.com", TrafficPolicy: top}, want: false},
		{name: "any host", ns: "app", spec: &networking.DestinationRule{Host: "*", TrafficPolicy: top}, want: true},
		{name: "with a workload selector", ns: "app", spec: &networking.DestinationRule{Host: "web", TrafficPolicy: top,
			WorkloadSelector: &typev1beta1.WorkloadSelector{MatchLabels: version("v1")}}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := model.NewStore()
			store.UpsertService(newService("app", "web", nil))
			if tt.spec != nil {
				store.UpsertConfig(ruleConfig(tt.ns, "rule", 0, tt.spec))
			}
			pc := Build(store, testOpts, nil, nil)
			if got := pc.MayPassThrough(hostname("app", "web")); got != tt.want {
				t.Errorf("MayPassThrough = %v, want %v", got, tt.want)
			}
		})
	}
}
