package envoygen

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/xds/loadassign"
)

// Topology labels that failoverPriority may name; Istio fills them from the
// locality of the proxy and of each endpoint.
const (
	topologyRegion  = "topology.kubernetes.io/region"
	topologyZone    = "topology.kubernetes.io/zone"
	topologySubzone = "topology.istio.io/subzone"
)

// localityPlan is how a proxy's place shapes one cluster's load assignment,
// with Istio's semantics: a matching distribute entry sets locality weights;
// otherwise, with outlier detection (without which Envoy never fails over),
// endpoints get priorities by failoverPriority labels and/or by how much of
// the proxy's locality they share (failover redirects a region elsewhere).
type localityPlan struct {
	setting    *networking.LocalityLoadBalancerSetting
	distribute *networking.LocalityLoadBalancerSetting_Distribute
	failover   bool
	locality   model.Locality
	// labelValues are the proxy's values of the failoverPriority labels,
	// "\x00"-joined; empty when failoverPriority does not apply.
	labelValues string
}

func planLocality(policy *networking.TrafficPolicy, proxy *model.Proxy) localityPlan {
	lp := localityPolicyOf(policy.GetLoadBalancer())
	if !lp.enabled {
		return localityPlan{}
	}
	s := lp.setting
	if len(s.GetDistribute()) > 0 {
		for _, d := range s.GetDistribute() {
			if localityMatches(proxy.Locality, d.GetFrom()) {
				return localityPlan{setting: s, distribute: d}
			}
		}
		return localityPlan{}
	}
	if policy.GetOutlierDetection() == nil {
		return localityPlan{}
	}
	plan := localityPlan{setting: s, failover: true, locality: proxy.Locality}
	if fp := s.GetFailoverPriority(); len(fp) > 0 && (len(proxy.Labels) > 0 || proxy.Locality != (model.Locality{})) {
		values := make([]string, len(fp))
		for i, entry := range fp {
			key, override, hasOverride := strings.Cut(entry, "=")
			if hasOverride {
				values[i] = override
			} else {
				values[i] = topologyValue(proxy.Locality, proxy.Labels, key)
			}
		}
		plan.labelValues = strings.Join(values, "\x00")
	}
	return plan
}

func (p localityPlan) applies() bool { return p.distribute != nil || p.failover }

// topologyValue is a label of a workload, with the topology labels taken
// from its locality when it has one.
func topologyValue(loc model.Locality, labels map[string]string, key string) string {
	switch {
	case key == topologyRegion && loc.Region != "":
		return loc.Region
	case key == topologyZone && loc.Zone != "":
		return loc.Zone
	case key == topologySubzone && loc.SubZone != "":
		return loc.SubZone
	}
	return labels[key]
}

// localityMatches matches "region/zone/subzone" patterns where each part
// may be "*" and trailing parts may be omitted.
func localityMatches(loc model.Locality, pattern string) bool {
	region, rest, _ := strings.Cut(pattern, "/")
	zone, subzone, _ := strings.Cut(rest, "/")
	return (region == "*" || region == loc.Region) &&
		(zone == "" || zone == "*" || zone == loc.Zone) &&
		(subzone == "" || subzone == "*" || subzone == loc.SubZone)
}

// buildLocalized lays out the load assignment for one plan.
func buildLocalized(name string, eps []*model.Endpoint, plan localityPlan) *loadassign.Layout {
	l := loadassign.NewLayout(name, eps)
	if plan.distribute != nil {
		l.Groups = applyDistribute(l.Groups, plan.distribute)
		return l
	}
	if plan.labelValues != "" {
		l.Groups = splitByFailoverPriority(l.Groups, plan)
		if len(plan.setting.GetFailover()) == 0 {
			return l
		}
	}
	applyLocalityFailover(l.Groups, plan.locality, plan.setting.GetFailover())
	return l
}

// applyDistribute weights localities as the distribute entry says. A
// pattern's weight is shared among the groups it matches in proportion to
// their size (rounded up, as Istio does); each group counts for the first
// pattern (in sorted order) that matches it. Groups no pattern matches, or
// whose weight is 0, receive no traffic and are left out.
func applyDistribute(groups []loadassign.Group, d *networking.LocalityLoadBalancerSetting_Distribute) []loadassign.Group {
	matched := make([]bool, len(groups))
	patterns := make([]string, 0, len(d.GetTo()))
	for p := range d.GetTo() {
		patterns = append(patterns, p)
	}
	slices.Sort(patterns)
	members := make([]int, 0, len(groups))
	for _, pattern := range patterns {
		var total uint64
		members = members[:0]
		for i := range groups {
			if !matched[i] && localityMatches(groups[i].Locality, pattern) {
				matched[i] = true
				members = append(members, i)
				total += uint64(groups[i].Weight)
			}
		}
		// Each group's share depends only on its own size and the total,
		// so the weights can be replaced as they are computed.
		for _, i := range members {
			share := float64(uint64(groups[i].Weight)*uint64(d.GetTo()[pattern])) / float64(total)
			groups[i].Weight = uint32(math.Ceil(share))
		}
	}
	kept := groups[:0]
	for i, g := range groups {
		if matched[i] && g.Weight > 0 {
			kept = append(kept, g)
		}
	}
	return kept
}

// splitByFailoverPriority splits each locality group by how many of the
// failoverPriority labels, in order, an endpoint shares with the proxy: all
// of them is priority 0, failing at label j of n is priority n-j. Each
// group's endpoints are reordered in place (stably) so that every priority
// is a run of them.
func splitByFailoverPriority(groups []loadassign.Group, plan localityPlan) []loadassign.Group {
	entries := plan.setting.GetFailoverPriority()
	want := strings.Split(plan.labelValues, "\x00")
	keys := make([]string, len(entries))
	for j, entry := range entries {
		keys[j], _, _ = strings.Cut(entry, "=")
	}
	priorityOf := func(ep *model.Endpoint) uint32 {
		for j, key := range keys {
			if topologyValue(ep.Locality, ep.Labels, key) != want[j] {
				return uint32(len(keys) - j)
			}
		}
		return 0
	}
	// ends[p] is first where priority p's run starts, then where it ends.
	ends := make([]int, len(keys)+1)
	var priorities []uint32
	var original []*model.Endpoint
	out := make([]loadassign.Group, 0, len(groups))
	for _, g := range groups {
		clear(ends)
		priorities = priorities[:0]
		for _, ep := range g.Endpoints {
			p := priorityOf(ep)
			priorities = append(priorities, p)
			ends[p]++
		}
		start := 0
		for p, count := range ends {
			ends[p] = start
			start += count
		}
		original = append(original[:0], g.Endpoints...)
		for i, ep := range original {
			g.Endpoints[ends[priorities[i]]] = ep
			ends[priorities[i]]++
		}
		start = 0
		for p, end := range ends {
			if end > start {
				out = append(out, loadassign.Group{
					Locality:  g.Locality,
					Endpoints: g.Endpoints[start:end:end],
					Weight:    uint32(end - start),
					Priority:  uint32(p),
				})
			}
			start = end
		}
	}
	clear(original)
	compactPriorities(out)
	return out
}

// applyLocalityFailover prioritises groups by what they share with the
// proxy's locality: all of it 0, region and zone 1, region 2, nothing 3, and
// 4 for regions a failover entry for the proxy's region does not name.
// Existing priorities (from failoverPriority) stay more significant.
func applyLocalityFailover(groups []loadassign.Group, proxy model.Locality, failover []*networking.LocalityLoadBalancerSetting_Failover) {
	for i := range groups {
		g := &groups[i]
		loc := g.Locality
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
	compactPriorities(groups)
}

// compactPriorities renumbers priorities 0..N without gaps, keeping their
// order, as Envoy requires.
func compactPriorities(groups []loadassign.Group) {
	distinct := make([]uint32, 0, len(groups))
	for _, g := range groups {
		distinct = append(distinct, g.Priority)
	}
	slices.Sort(distinct)
	distinct = slices.Compact(distinct)
	for i := range groups {
		rank, _ := slices.BinarySearch(distinct, groups[i].Priority)
		groups[i].Priority = uint32(rank)
	}
	slices.SortStableFunc(groups, func(a, b loadassign.Group) int { return cmp.Compare(a.Priority, b.Priority) })
}

// localizedCache holds locality-dependent load assignments for the two most
// recent push context versions. An entry is valid while the push context
// hands out the same endpoint list it was built from (endpoint-only pushes
// keep the version but swap lists).
type localizedCache struct {
	mu   sync.Mutex
	gens [2]*localizedGeneration
}

type localizedGeneration struct {
	version string
	entries sync.Map // localizedKey -> *localizedEntry
}

type localizedKey struct {
	cluster     string
	setting     *networking.LocalityLoadBalancerSetting
	distribute  *networking.LocalityLoadBalancerSetting_Distribute
	locality    model.Locality
	labelValues string
}

type localizedEntry struct {
	endpoints []*model.Endpoint
	res       model.Resource
}

func (c *localizedCache) generation(version string) *localizedGeneration {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range c.gens {
		if g != nil && g.version == version {
			return g
		}
	}
	g := &localizedGeneration{version: version}
	c.gens[1], c.gens[0] = c.gens[0], g
	return g
}

func (g *localizedGeneration) get(name string, eps []*model.Endpoint, plan localityPlan) (model.Resource, error) {
	key := localizedKey{cluster: name, setting: plan.setting, distribute: plan.distribute, labelValues: plan.labelValues}
	if plan.distribute == nil {
		key.locality = plan.locality
	}
	if v, ok := g.entries.Load(key); ok {
		e := v.(*localizedEntry)
		if len(e.endpoints) == len(eps) && (len(eps) == 0 || &e.endpoints[0] == &eps[0]) {
			return e.res, nil
		}
	}
	b, err := buildLocalized(name, eps, plan).Marshal()
	if err != nil {
		return model.Resource{}, err
	}
	res := model.Resource{Name: name, Resource: &anypb.Any{TypeUrl: EndpointType, Value: b}}
	g.entries.Store(key, &localizedEntry{endpoints: eps, res: res})
	return res, nil
}
