package envoygen

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/xds/loadassign"
)

// The reference below is the message-based implementation the layout
// transforms replaced: it adjusts a decoded ClusterLoadAssignment in place.
// The tests hold the wire encoding of buildLocalized to proto.Marshal of
// what the reference makes of the shared assignment.

func refCoreLocality(l *core.Locality) model.Locality {
	return model.Locality{Region: l.GetRegion(), Zone: l.GetZone(), SubZone: l.GetSubZone()}
}

// refLocalize adjusts the shared assignment cla for one plan.
func refLocalize(cla *endpoint.ClusterLoadAssignment, eps []*model.Endpoint, plan localityPlan) *endpoint.ClusterLoadAssignment {
	if plan.distribute != nil {
		refApplyDistribute(cla, plan.distribute)
		return cla
	}
	if plan.labelValues != "" {
		refSplitByFailoverPriority(cla, eps, plan)
		if len(plan.setting.GetFailover()) == 0 {
			return cla
		}
	}
	refApplyLocalityFailover(cla, plan.locality, plan.setting.GetFailover())
	return cla
}

// refApplyDistribute weights localities as the distribute entry says. A
// pattern's weight is shared among the groups it matches in proportion to
// their size (rounded up, as Istio does); each group counts for the first
// pattern (in sorted order) that matches it. Groups no pattern matches, or
// whose weight is 0, receive no traffic and are left out.
func refApplyDistribute(cla *endpoint.ClusterLoadAssignment, d *networking.LocalityLoadBalancerSetting_Distribute) {
	groups := cla.Endpoints
	weights := make([]uint32, len(groups))
	matched := make([]bool, len(groups))
	patterns := make([]string, 0, len(d.GetTo()))
	for p := range d.GetTo() {
		patterns = append(patterns, p)
	}
	slices.Sort(patterns)
	for _, pattern := range patterns {
		var total uint64
		var members []int
		for i, g := range groups {
			if !matched[i] && localityMatches(refCoreLocality(g.GetLocality()), pattern) {
				matched[i] = true
				members = append(members, i)
				total += uint64(g.GetLoadBalancingWeight().GetValue())
			}
		}
		for _, i := range members {
			share := float64(uint64(groups[i].GetLoadBalancingWeight().GetValue())*uint64(d.GetTo()[pattern])) / float64(total)
			weights[i] = uint32(math.Ceil(share))
		}
	}
	kept := groups[:0]
	for i, g := range groups {
		if weights[i] > 0 {
			g.LoadBalancingWeight = wrapperspb.UInt32(weights[i])
			kept = append(kept, g)
		}
	}
	cla.Endpoints = kept
}

// refSplitByFailoverPriority splits each locality group by how many of the
// failoverPriority labels, in order, an endpoint shares with the proxy: all
// of them is priority 0, failing at label j of n is priority n-j.
func refSplitByFailoverPriority(cla *endpoint.ClusterLoadAssignment, eps []*model.Endpoint, plan localityPlan) {
	keys := plan.setting.GetFailoverPriority()
	want := strings.Split(plan.labelValues, "\x00")
	byAddr := make(map[refEndpointKey]*model.Endpoint, len(eps))
	for _, ep := range eps {
		k := refEndpointKey{ep.Address, ep.Port}
		if _, dup := byAddr[k]; !dup {
			byAddr[k] = ep
		}
	}
	priorityOf := func(lbe *endpoint.LbEndpoint) uint32 {
		sa := lbe.GetEndpoint().GetAddress().GetSocketAddress()
		ep := byAddr[refEndpointKey{sa.GetAddress(), sa.GetPortValue()}]
		if ep == nil {
			return uint32(len(keys))
		}
		for j, entry := range keys {
			key, _, _ := strings.Cut(entry, "=")
			if topologyValue(ep.Locality, ep.Labels, key) != want[j] {
				return uint32(len(keys) - j)
			}
		}
		return 0
	}
	var out []*endpoint.LocalityLbEndpoints
	for _, g := range cla.Endpoints {
		buckets := make([][]*endpoint.LbEndpoint, len(keys)+1)
		for _, lbe := range g.LbEndpoints {
			p := priorityOf(lbe)
			buckets[p] = append(buckets[p], lbe)
		}
		for p, members := range buckets {
			if len(members) == 0 {
				continue
			}
			out = append(out, &endpoint.LocalityLbEndpoints{
				Locality:            g.Locality,
				LbEndpoints:         members,
				LoadBalancingWeight: wrapperspb.UInt32(uint32(len(members))),
				Priority:            uint32(p),
			})
		}
	}
	cla.Endpoints = out
	refCompactPriorities(out)
}

type refEndpointKey struct {
	address string
	port    uint32
}

// refApplyLocalityFailover prioritises groups by what they share with the
// proxy's locality: all of it 0, region and zone 1, region 2, nothing 3, and
// 4 for regions a failover entry for the proxy's region does not name.
// Existing priorities (from failoverPriority) stay more significant.
func refApplyLocalityFailover(cla *endpoint.ClusterLoadAssignment, proxy model.Locality, failover []*networking.LocalityLoadBalancerSetting_Failover) {
	for _, g := range cla.Endpoints {
		loc := refCoreLocality(g.GetLocality())
		p := uint32(3)
		switch {
		case loc.Region != proxy.Region:
			for _, f := range failover {
				if f.GetFrom() == proxy.Region {
					if loc.Region != f.GetTo() {
						p = 4
					}
					break
				}
			}
		case loc.Zone != proxy.Zone:
			p = 2
		case loc.SubZone != proxy.SubZone:
			p = 1
		default:
			p = 0
		}
		g.Priority = g.Priority*5 + p
	}
	refCompactPriorities(cla.Endpoints)
}

// refCompactPriorities renumbers priorities 0..N without gaps, keeping their
// order, as Envoy requires.
func refCompactPriorities(groups []*endpoint.LocalityLbEndpoints) {
	distinct := make([]uint32, 0, len(groups))
	for _, g := range groups {
		distinct = append(distinct, g.Priority)
	}
	slices.Sort(distinct)
	distinct = slices.Compact(distinct)
	for _, g := range groups {
		rank, _ := slices.BinarySearch(distinct, g.Priority)
		g.Priority = uint32(rank)
	}
	slices.SortStableFunc(groups, func(a, b *endpoint.LocalityLbEndpoints) int { return cmp.Compare(a.Priority, b.Priority) })
}

// checkLocalized compares buildLocalized's encoding with the reference.
func checkLocalized(t *testing.T, name string, eps []*model.Endpoint, plan localityPlan) {
	t.Helper()
	got, err := buildLocalized(name, eps, plan).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	shared, err := loadassign.NewLayout(name, eps).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	cla := &endpoint.ClusterLoadAssignment{}
	if err := proto.Unmarshal(shared, cla); err != nil {
		t.Fatal(err)
	}
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(refLocalize(cla, eps, plan))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		gotCLA := &endpoint.ClusterLoadAssignment{}
		_ = proto.Unmarshal(got, gotCLA)
		t.Errorf("localized assignment differs from the reference:\n got %v\nwant %v", gotCLA, refLocalize(cla, eps, plan))
	}
}

func localEndpoint(addr string, loc model.Locality, labels map[string]string) *model.Endpoint {
	return &model.Endpoint{Address: addr, Port: 8080, Locality: loc, Labels: labels}
}

func distributePolicy(from string, to map[string]uint32) *networking.TrafficPolicy {
	return &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
		LocalityLbSetting: &networking.LocalityLoadBalancerSetting{
			Distribute: []*networking.LocalityLoadBalancerSetting_Distribute{{From: from, To: to}},
		},
	}}
}

func failoverPolicy(failover []*networking.LocalityLoadBalancerSetting_Failover, priority []string) *networking.TrafficPolicy {
	return &networking.TrafficPolicy{
		OutlierDetection: &networking.OutlierDetection{},
		LoadBalancer: &networking.LoadBalancerSettings{LocalityLbSetting: &networking.LocalityLoadBalancerSetting{
			Failover: failover, FailoverPriority: priority,
		}},
	}
}

func TestLocalizedAssignmentMatchesReference(t *testing.T) {
	e1a := model.Locality{Region: "us-east", Zone: "us-east-1a", SubZone: "rack1"}
	e1a2 := model.Locality{Region: "us-east", Zone: "us-east-1a", SubZone: "rack2"}
	e1b := model.Locality{Region: "us-east", Zone: "us-east-1b"}
	w1a := model.Locality{Region: "us-west", Zone: "us-west-1a"}
	eu := model.Locality{Region: "eu"}
	gold, silver := map[string]string{"tier": "gold"}, map[string]string{"tier": "silver"}
	eps := []*model.Endpoint{
		localEndpoint("10.0.0.1", e1a, gold), localEndpoint("10.0.0.2", e1a, silver), localEndpoint("10.0.0.3", e1a2, gold),
		localEndpoint("10.0.0.4", e1b, nil), localEndpoint("10.0.0.5", e1b, silver), localEndpoint("10.0.0.6", w1a, gold),
		localEndpoint("fd00::7", w1a, silver), localEndpoint("10.0.0.8", eu, gold), localEndpoint("10.0.0.9", model.Locality{}, gold),
		localEndpoint("10.0.0.1", w1a, silver), // a duplicate: dropped, the first one's labels count
	}
	proxy := &model.Proxy{Locality: e1a, Labels: gold}
	tests := []struct {
		name   string
		policy *networking.TrafficPolicy
		proxy  *model.Proxy
	}{
		{"distribute over every group", distributePolicy("us-east/*", map[string]uint32{"us-east": 70, "us-west": 20, "*": 10}), proxy},
		{"distribute rounds shares up", distributePolicy("*", map[string]uint32{"us-east/us-east-1a": 33, "us-east/us-east-1b": 67}), proxy},
		{"distribute drops zero weights", distributePolicy("*", map[string]uint32{"us-west": 0, "us-east/*/rack1": 100}), proxy},
		{"distribute first sorted pattern wins", distributePolicy("*", map[string]uint32{"*": 5, "us-east": 95}), proxy},
		{"distribute matching nothing", distributePolicy("*", map[string]uint32{"mars": 100}), proxy},
		{"failover by locality", failoverPolicy(nil, nil), proxy},
		{"failover to a named region", failoverPolicy([]*networking.LocalityLoadBalancerSetting_Failover{{From: "us-east", To: "eu"}}, nil), proxy},
		{"failover from another region", failoverPolicy([]*networking.LocalityLoadBalancerSetting_Failover{{From: "ap", To: "eu"}}, nil), proxy},
		{"failover proxy without locality", failoverPolicy(nil, nil), &model.Proxy{Labels: silver}},
		{"failover priority by labels", failoverPolicy(nil, []string{"tier", topologyRegion}), proxy},
		{"failover priority by zone and subzone", failoverPolicy(nil, []string{topologyZone, topologySubzone}), proxy},
		{"failover priority with an override", failoverPolicy(nil, []string{"tier=silver", topologyRegion}), proxy},
		{"failover priority then locality", failoverPolicy([]*networking.LocalityLoadBalancerSetting_Failover{{From: "us-east", To: "us-west"}},
			[]string{"tier"}), proxy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := planLocality(tt.policy, tt.proxy)
			if !plan.applies() {
				t.Fatal("the case's policy does not apply to its proxy")
			}
			checkLocalized(t, "outbound|80||api.app.svc.cluster.local", eps, plan)
		})
	}
}

// randomLocalityPolicy draws a distribute, failover or failoverPriority
// setting over the localities and labels randomLocalEndpoints uses.
func randomLocalityPolicy(r *rand.Rand) *networking.TrafficPolicy {
	pick := func(options []string) []string {
		var out []string
		for _, o := range options {
			if r.IntN(2) == 0 {
				out = append(out, o)
			}
		}
		r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		return out
	}
	if r.IntN(3) == 0 {
		to := map[string]uint32{}
		for _, p := range pick([]string{"*", "r1", "r1/z1", "r1/*/s1", "r2/*", "r3", "/z1"}) {
			to[p] = uint32(r.IntN(4) * r.IntN(40))
		}
		return distributePolicy([]string{"*", "r1", "r1/z1/*"}[r.IntN(3)], to)
	}
	var failover []*networking.LocalityLoadBalancerSetting_Failover
	for _, from := range pick([]string{"r1", "r2", "r3"}) {
		failover = append(failover, &networking.LocalityLoadBalancerSetting_Failover{From: from, To: []string{"r1", "r2", "r3"}[r.IntN(3)]})
	}
	var priority []string
	if r.IntN(2) == 0 {
		priority = pick([]string{"tier", "app", topologyRegion, topologyZone, topologySubzone, "tier=gold"})
	}
	return failoverPolicy(failover, priority)
}

func randomLocality(r *rand.Rand) model.Locality {
	regions, zones, subzones := []string{"", "r1", "r2", "r3"}, []string{"", "z1", "z2"}, []string{"", "s1"}
	return model.Locality{Region: regions[r.IntN(len(regions))], Zone: zones[r.IntN(len(zones))], SubZone: subzones[r.IntN(len(subzones))]}
}

func randomLabels(r *rand.Rand) map[string]string {
	labels := map[string]string{}
	if v := []string{"", "gold", "silver"}[r.IntN(3)]; v != "" {
		labels["tier"] = v
	}
	if r.IntN(2) == 0 {
		labels["app"] = "a"
	}
	if r.IntN(4) == 0 {
		labels[topologyRegion] = "r2"
	}
	return labels
}

func TestRandomLocalizedAssignmentsMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	applied := map[string]int{}
	for i := range 600 {
		eps := make([]*model.Endpoint, r.IntN(40))
		for j := range eps {
			eps[j] = localEndpoint(fmt.Sprintf("10.0.%d.%d", r.IntN(2), r.IntN(30)), randomLocality(r), randomLabels(r))
			eps[j].Port = uint32(80 + r.IntN(2))
			eps[j].Health = model.HealthStatus(r.IntN(3))
		}
		proxy := &model.Proxy{Locality: randomLocality(r), Labels: randomLabels(r)}
		plan := planLocality(randomLocalityPolicy(r), proxy)
		switch {
		case plan.distribute != nil:
			applied["distribute"]++
		case plan.labelValues != "":
			applied["failoverPriority"]++
		case plan.failover:
			applied["failover"]++
		default:
			continue
		}
		checkLocalized(t, fmt.Sprintf("outbound|80||svc-%d", i), eps, plan)
		if t.Failed() {
			t.Fatalf("case %d: plan %+v, proxy %+v", i, plan, proxy)
		}
	}
	for _, kind := range []string{"distribute", "failover", "failoverPriority"} {
		if applied[kind] < 50 {
			t.Errorf("only %d random cases exercised %s", applied[kind], kind)
		}
	}
}

// TestLocalityLoadBalancingAsIstioDocuments checks the assignment a proxy
// gets against expectations worked out by hand from Istio's documented
// rules (LocalityLoadBalancerSetting), so that it does not lean on the
// functions under test as the reference above does. Localities are sorted
// (eu first); a group's weight is its endpoint count unless distribute sets
// it; priorities are compacted to 0..N.
func TestLocalityLoadBalancingAsIstioDocuments(t *testing.T) {
	rack1 := model.Locality{Region: "us-east", Zone: "us-east-1a", SubZone: "rack1"}
	gold, silver := map[string]string{"tier": "gold"}, map[string]string{"tier": "silver"}
	eps := []*model.Endpoint{
		localEndpoint("10.0.0.1", rack1, gold),
		localEndpoint("10.0.0.2", rack1, silver),
		localEndpoint("10.0.0.3", model.Locality{Region: "us-east", Zone: "us-east-1b"}, gold),
		localEndpoint("10.0.0.4", model.Locality{Region: "us-west", Zone: "us-west-1a"}, gold),
		localEndpoint("10.0.0.5", model.Locality{Region: "eu"}, silver),
	}
	inRack1 := &model.Proxy{Locality: rack1, Labels: gold}
	tests := []struct {
		name   string
		policy *networking.TrafficPolicy
		proxy  *model.Proxy
		want   []string // "locality priority weight addresses", in order
	}{
		{"failover: same subzone 0, same zone 1, same region 2, elsewhere 3",
			failoverPolicy(nil, nil), inRack1, []string{
				"us-east/us-east-1a/rack1 p0 w2 10.0.0.1 10.0.0.2",
				"us-east/us-east-1b p1 w1 10.0.0.3",
				"eu p2 w1 10.0.0.5",
				"us-west/us-west-1a p2 w1 10.0.0.4",
			}},
		{"failover to a named region: the others drop below it",
			failoverPolicy([]*networking.LocalityLoadBalancerSetting_Failover{{From: "us-east", To: "eu"}}, nil), inRack1, []string{
				"us-east/us-east-1a/rack1 p0 w2 10.0.0.1 10.0.0.2",
				"us-east/us-east-1b p1 w1 10.0.0.3",
				"eu p2 w1 10.0.0.5",
				"us-west/us-west-1a p3 w1 10.0.0.4",
			}},
		{"failover for another region changes nothing here",
			failoverPolicy([]*networking.LocalityLoadBalancerSetting_Failover{{From: "eu", To: "us-west"}}, nil), inRack1, []string{
				"us-east/us-east-1a/rack1 p0 w2 10.0.0.1 10.0.0.2",
				"us-east/us-east-1b p1 w1 10.0.0.3",
				"eu p2 w1 10.0.0.5",
				"us-west/us-west-1a p2 w1 10.0.0.4",
			}},
		{"failover for a proxy without locality: all equal",
			failoverPolicy(nil, nil), &model.Proxy{Labels: gold}, []string{
				"eu p0 w1 10.0.0.5",
				"us-east/us-east-1a/rack1 p0 w2 10.0.0.1 10.0.0.2",
				"us-east/us-east-1b p0 w1 10.0.0.3",
				"us-west/us-west-1a p0 w1 10.0.0.4",
			}},
		{"distribute: a pattern's weight shared by size, rounded up; unmatched left out",
			distributePolicy("us-east/*", map[string]uint32{"us-east/*": 100}), inRack1, []string{
				"us-east/us-east-1a/rack1 p0 w67 10.0.0.1 10.0.0.2",
				"us-east/us-east-1b p0 w34 10.0.0.3",
			}},
		{"distribute: one locality per pattern",
			distributePolicy("us-east/us-east-1a/*", map[string]uint32{"us-east/us-east-1a/*": 80, "us-west/*": 20}), inRack1, []string{
				"us-east/us-east-1a/rack1 p0 w80 10.0.0.1 10.0.0.2",
				"us-west/us-west-1a p0 w20 10.0.0.4",
			}},
		{"failoverPriority: endpoints with the proxy's label first, in every locality",
			failoverPolicy(nil, []string{"tier"}), inRack1, []string{
				"us-east/us-east-1a/rack1 p0 w1 10.0.0.1",
				"us-east/us-east-1b p0 w1 10.0.0.3",
				"us-west/us-west-1a p0 w1 10.0.0.4",
				"eu p1 w1 10.0.0.5",
				"us-east/us-east-1a/rack1 p1 w1 10.0.0.2",
			}},
		{"failoverPriority: the first label outranks the second",
			failoverPolicy(nil, []string{topologyRegion, "tier"}), inRack1, []string{
				"us-east/us-east-1a/rack1 p0 w1 10.0.0.1",
				"us-east/us-east-1b p0 w1 10.0.0.3",
				"us-east/us-east-1a/rack1 p1 w1 10.0.0.2",
				"eu p2 w1 10.0.0.5",
				"us-west/us-west-1a p2 w1 10.0.0.4",
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wire, err := buildLocalized("outbound|80||api.app.svc.cluster.local", eps, planLocality(tt.policy, tt.proxy)).Marshal()
			if err != nil {
				t.Fatal(err)
			}
			cla := &endpoint.ClusterLoadAssignment{}
			if err := proto.Unmarshal(wire, cla); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, g := range cla.GetEndpoints() {
				l := g.GetLocality()
				line := strings.TrimRight(strings.Join([]string{l.GetRegion(), l.GetZone(), l.GetSubZone()}, "/"), "/")
				line += fmt.Sprintf(" p%d w%d", g.GetPriority(), g.GetLoadBalancingWeight().GetValue())
				for _, lbe := range g.GetLbEndpoints() {
					line += " " + lbe.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
				}
				got = append(got, line)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("groups:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

// The reference above uses localityMatches and topologyValue; these
// literal tables, from Istio's documentation of locality patterns and
// failoverPriority labels, are what it stands on.
func TestLocalityPatterns(t *testing.T) {
	rack1 := model.Locality{Region: "us-east", Zone: "us-east-1a", SubZone: "rack1"}
	for _, tc := range []struct {
		pattern string
		want    bool
	}{
		{"*", true},
		{"us-east", true},
		{"us-east/*", true},
		{"us-east/us-east-1a", true},
		{"us-east/us-east-1a/*", true},
		{"us-east/us-east-1a/rack1", true},
		{"us-east/*/rack1", true},
		{"*/us-east-1a/rack1", true},
		{"us-west", false},
		{"us-east/us-east-1b", false},
		{"us-east/us-east-1a/rack2", false},
		{"us", false},
	} {
		if got := localityMatches(rack1, tc.pattern); got != tc.want {
			t.Errorf("localityMatches(%v, %q) = %v, want %v", rack1, tc.pattern, got, tc.want)
		}
	}

	labels := map[string]string{"tier": "gold", topologyZone: "from-label"}
	for _, tc := range []struct {
		loc  model.Locality
		key  string
		want string
	}{
		{rack1, topologyRegion, "us-east"},
		{rack1, topologyZone, "us-east-1a"}, // the locality wins over the label
		{rack1, topologySubzone, "rack1"},
		{rack1, "tier", "gold"},
		{rack1, "absent", ""},
		{model.Locality{}, topologyZone, "from-label"},
		{model.Locality{}, topologyRegion, ""},
	} {
		if got := topologyValue(tc.loc, labels, tc.key); got != tc.want {
			t.Errorf("topologyValue(%v, %q) = %q, want %q", tc.loc, tc.key, got, tc.want)
		}
	}
}
