package pushcontext

import (
	"maps"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// RuleChange says how the destination rules for one host changed between
// two snapshots, for any proxy: whether the subsets (names or labels),
// whether the tunnel settings (top level or of a subset), and whether what
// shapes load assignments by locality differ. The last is localityLbSetting
// and whether outlier detection is set, at every level a cluster's policy
// merges from (top, port, subset, subset port): without outlier detection
// Envoy never fails over, so locality failover applies only with it.
type RuleChange struct{ SubsetsChanged, TunnelChanged, LocalityChanged bool }

var allChanged = RuleChange{SubsetsChanged: true, TunnelChanged: true, LocalityChanged: true}

// otherNamespaces stands for every namespace that has no rules of its own
// and that no exportTo names: they all resolve rules alike.
const otherNamespaces = "\x00other"

// ruleChangesMemo keeps the last RuleChanges answer, since every connection
// of a push asks the same question.
type ruleChangesMemo struct {
	prev    *PushContext
	req     *model.PushRequest
	changes map[string]RuleChange
}

// RuleChanges says which hosts a push request's DestinationRule and Service
// changes touch, comparing prev (the snapshot the request's changes were
// applied to) with this one. Every host that a changed rule was for, in
// either snapshot, is listed (a wildcard rule lists every service host it
// matches, and every host it matches that a VirtualService routes to), and
// so is every host of a rule the snapshots differ in that req does not
// name (unannouncedRules), with whether its subsets, tunnel or locality
// settings changed for some proxy; a changed service's hostname counts as
// all-changed.
// Without prev or without listed changes (a forced push), every host is
// all-changed. The result is shared: never mutate it.
func (pc *PushContext) RuleChanges(prev *PushContext, req *model.PushRequest) map[string]RuleChange {
	if m := pc.ruleChanges.Load(); m != nil && m.prev == prev && m.req == req {
		return m.changes
	}
	changes := pc.computeRuleChanges(prev, req)
	pc.ruleChanges.Store(&ruleChangesMemo{prev: prev, req: req, changes: changes})
	return changes
}

func (pc *PushContext) computeRuleChanges(prev *PushContext, req *model.PushRequest) map[string]RuleChange {
	out := map[string]RuleChange{}
	if prev == nil || req == nil || len(req.ConfigsUpdated) == 0 || !prev.opts.equal(pc.opts) {
		for _, s := range []*PushContext{prev, pc} {
			if s == nil {
				continue
			}
			for _, svc := range s.services.all {
				out[svc.Hostname] = allChanged
			}
			for _, e := range s.rules.entries {
				if !isWildcard(e.host) {
					out[e.host] = allChanged
				}
			}
		}
		return out
	}
	snapshots := [2]*PushContext{prev, pc}
	patterns := map[string]struct{}{}
	for key := range req.ConfigsUpdated {
		name := model.NamespacedName{Namespace: key.Namespace, Name: key.Name}
		switch key.Kind {
		case model.KindService:
			for _, s := range snapshots {
				if ord, ok := s.services.byName[name]; ok {
					out[s.services.all[ord].Hostname] = allChanged
				}
			}
		case model.KindDestinationRule:
			for _, s := range snapshots {
				for _, host := range s.rules.hostsOf(name) {
					patterns[host] = struct{}{}
				}
			}
		}
	}
	for _, name := range unannouncedRules(prev.rules, pc.rules, req) {
		for _, s := range snapshots {
			for _, host := range s.rules.hostsOf(name) {
				patterns[host] = struct{}{}
			}
		}
	}
	if len(patterns) == 0 {
		return out
	}
	hosts := map[string]struct{}{}
	for pattern := range patterns {
		if !isWildcard(pattern) {
			hosts[pattern] = struct{}{}
			continue
		}
		suffix := pattern[1:]
		for _, s := range snapshots {
			for _, svc := range s.services.all {
				if strings.HasSuffix(svc.Hostname, suffix) {
					hosts[svc.Hostname] = struct{}{}
				}
			}
			// Routes read the rule of every host they lead to (its
			// consistent hash), a Service's or not.
			for _, vs := range s.virtualServices.all {
				for host := range vs.DestinationHosts() {
					if strings.HasSuffix(host, suffix) {
						hosts[host] = struct{}{}
					}
				}
			}
		}
	}
	namespaces := ruleNamespaces(prev, pc)
	for host := range hosts {
		if _, done := out[host]; done {
			continue // a changed service: already all-changed
		}
		out[host] = compareRules(prev, pc, host, namespaces)
	}
	return out
}

// unannouncedRules lists the DestinationRules that differ between two
// indexes although req does not name them. The store is readable before
// its change handlers run, so a build can read a later write than the
// ones its request announces; the push of that write, once announced,
// then finds it already in the snapshot it compares with, and would tell
// no proxy. A rule the store replaced is a new *model.Config, so a new
// pointer is a change (a rewrite of the same content, at worst a
// comparison that finds nothing).
func unannouncedRules(prev, next *ruleIndex, req *model.PushRequest) []model.NamespacedName {
	if prev == next {
		return nil
	}
	var changed []model.NamespacedName
	note := func(c *model.Config) {
		n := model.NamespacedName{Namespace: c.Namespace, Name: c.Name}
		if _, ok := req.ConfigsUpdated[model.ConfigKey{Kind: model.KindDestinationRule, Namespace: n.Namespace, Name: n.Name}]; !ok {
			changed = append(changed, n)
		}
	}
	// Rules come in creation order, which an update keeps: the usual case
	// is a pairwise walk, allocating nothing.
	if len(prev.sources) == len(next.sources) {
		aligned := true
		for i, c := range next.sources {
			old := prev.sources[i]
			if old == c {
				continue
			}
			if old.Namespace != c.Namespace || old.Name != c.Name {
				aligned = false
				break
			}
			note(c)
		}
		if aligned {
			return changed
		}
		changed = changed[:0]
	}
	before := make(map[model.NamespacedName]*model.Config, len(prev.sources))
	for _, c := range prev.sources {
		before[model.NamespacedName{Namespace: c.Namespace, Name: c.Name}] = c
	}
	for _, c := range next.sources {
		n := model.NamespacedName{Namespace: c.Namespace, Name: c.Name}
		if old, ok := before[n]; !ok || old != c {
			note(c)
		}
		delete(before, n)
	}
	for _, c := range before {
		note(c)
	}
	return changed
}

// ruleNamespaces lists every proxy namespace whose rule resolution may
// differ from the others': namespaces with rules, namespaces some exportTo
// names, the root namespace, and one stand-in for all the rest.
func ruleNamespaces(snapshots ...*PushContext) []string {
	set := map[string]struct{}{otherNamespaces: {}}
	for _, s := range snapshots {
		set[s.opts.RootNamespace] = struct{}{}
		for ns := range s.rules.local {
			set[ns] = struct{}{}
		}
		for ns := range s.rules.selected {
			set[ns] = struct{}{}
		}
		for _, e := range s.rules.entries {
			for _, ns := range e.exportTo {
				if ns != model.ExportToAll {
					set[ns] = struct{}{}
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// compareRules compares what proxies in each namespace resolve for host in
// prev and next.
func compareRules(prev, next *PushContext, host string, namespaces []string) RuleChange {
	var change RuleChange
	for _, ns := range namespaces {
		a, b := prev.rulesSeenFrom(ns, host), next.rulesSeenFrom(ns, host)
		if len(a) == len(b) && sameSelectors(a, b) {
			// The same selectors pick the same proxies: compare pairwise.
			for i := range a {
				change = change.Or(diffRules(a[i].rule, b[i].rule))
			}
		} else {
			// Which proxy gets which rule changed: the only safe answer is
			// whether every rule a proxy may get is alike.
			all := append(slices.Clip(a), b...)
			for i := 1; i < len(all); i++ {
				change = change.Or(diffRules(all[0].rule, all[i].rule))
			}
		}
		if change == allChanged {
			break
		}
	}
	return change
}

// seenRule is one rule that some proxy in a namespace may resolve for a
// host; selector is "" for the rule of proxies no selector picks.
type seenRule struct {
	selector string
	wildcard string // the host pattern of a selector rule
	rule     *DestinationRule
}

// rulesSeenFrom lists the rules proxies in ns may resolve for host: what
// DestinationRuleFor gives, then every selector entry of ns for host, most
// specific host first.
func (pc *PushContext) rulesSeenFrom(ns, host string) []seenRule {
	out := []seenRule{{rule: pc.DestinationRuleFor(ns, host)}}
	selected := pc.rules.selected[ns]
	if selected == nil {
		return out
	}
	local := pc.rules.local[ns].match(host)
	add := func(entries []*ruleEntry) {
		for _, e := range entries {
			if len(local) > 0 && moreSpecific(local[0].host, e.host) {
				return // shadowed for every proxy
			}
			out = append(out, seenRule{selector: e.selector.key, wildcard: e.host, rule: e.layered})
		}
	}
	add(selected.exact[host])
	for _, w := range selected.wildcards {
		if strings.HasSuffix(host, w.suffix) {
			add(w.entries)
		}
	}
	return out
}

func sameSelectors(a, b []seenRule) bool {
	return slices.EqualFunc(a, b, func(x, y seenRule) bool { return x.selector == y.selector && x.wildcard == y.wildcard })
}

// Or is what changed in either c or o.
func (c RuleChange) Or(o RuleChange) RuleChange {
	return RuleChange{
		SubsetsChanged:  c.SubsetsChanged || o.SubsetsChanged,
		TunnelChanged:   c.TunnelChanged || o.TunnelChanged,
		LocalityChanged: c.LocalityChanged || o.LocalityChanged,
	}
}

// diffRules compares the subsets, tunnel and locality settings of two
// resolved rules.
func diffRules(a, b *DestinationRule) RuleChange {
	if a == b {
		return RuleChange{}
	}
	var as, bs *networking.DestinationRule
	if a != nil {
		as = a.Spec
	}
	if b != nil {
		bs = b.Spec
	}
	if as == bs {
		return RuleChange{}
	}
	subsetsA, subsetsB := as.GetSubsets(), bs.GetSubsets()
	return RuleChange{
		SubsetsChanged: !slices.EqualFunc(subsetsA, subsetsB, func(x, y *networking.Subset) bool {
			return x.GetName() == y.GetName() && maps.Equal(x.GetLabels(), y.GetLabels())
		}),
		TunnelChanged: !sameTunnel(as.GetTrafficPolicy().GetTunnel(), bs.GetTrafficPolicy().GetTunnel()) ||
			!maps.EqualFunc(subsetTunnels(subsetsA), subsetTunnels(subsetsB), sameTunnel),
		LocalityChanged: !sameLocality(as.GetTrafficPolicy(), bs.GetTrafficPolicy()) ||
			!subsetLocalitiesIn(subsetsA, subsetsB) || !subsetLocalitiesIn(subsetsB, subsetsA),
	}
}

// sameLocality compares what load assignments read of two traffic policies:
// localityLbSetting and whether outlier detection is set, top level and per
// port. Port entries are compared in order, so that any entry added or
// removed counts: a port entry may unset what the level above sets.
func sameLocality(a, b *networking.TrafficPolicy) bool {
	return sameLocalityLevel(a.GetLoadBalancer(), b.GetLoadBalancer(), a.GetOutlierDetection(), b.GetOutlierDetection()) &&
		slices.EqualFunc(a.GetPortLevelSettings(), b.GetPortLevelSettings(), func(x, y *networking.TrafficPolicy_PortTrafficPolicy) bool {
			return x.GetPort().GetNumber() == y.GetPort().GetNumber() &&
				sameLocalityLevel(x.GetLoadBalancer(), y.GetLoadBalancer(), x.GetOutlierDetection(), y.GetOutlierDetection())
		})
}

func sameLocalityLevel(lbA, lbB *networking.LoadBalancerSettings, odA, odB *networking.OutlierDetection) bool {
	return (odA == nil) == (odB == nil) && proto.Equal(lbA.GetLocalityLbSetting(), lbB.GetLocalityLbSetting())
}

// subsetLocalitiesIn reports whether every subset of a has the same
// locality inputs as the subset of that name in b (none when b has none).
// Subsets are few: a scan beats building a map.
func subsetLocalitiesIn(a, b []*networking.Subset) bool {
	for _, s := range a {
		var other *networking.TrafficPolicy
		if i := slices.IndexFunc(b, func(t *networking.Subset) bool { return t.GetName() == s.GetName() }); i >= 0 {
			other = b[i].GetTrafficPolicy()
		}
		if !sameLocality(s.GetTrafficPolicy(), other) {
			return false
		}
	}
	return true
}

func sameTunnel(a, b *networking.TrafficPolicy_TunnelSettings) bool {
	if a == nil || b == nil {
		return a == b
	}
	return proto.Equal(a, b)
}

// subsetTunnels maps subset names to their own tunnel settings; nil when no
// subset has any.
func subsetTunnels(subsets []*networking.Subset) map[string]*networking.TrafficPolicy_TunnelSettings {
	var out map[string]*networking.TrafficPolicy_TunnelSettings
	for _, s := range subsets {
		if t := s.GetTrafficPolicy().GetTunnel(); t != nil {
			if out == nil {
				out = map[string]*networking.TrafficPolicy_TunnelSettings{}
			}
			out[s.GetName()] = t
		}
	}
	return out
}

// configHosts maps each indexed DestinationRule to the hosts (as resolved,
// possibly wildcards) of the entries it was merged into. It is computed on
// first use: only RuleChanges needs it.
type configHosts struct {
	once   sync.Once
	byRule map[model.NamespacedName][]string
}

func (idx *ruleIndex) hostsOf(rule model.NamespacedName) []string {
	idx.configHosts.once.Do(func() {
		idx.configHosts.byRule = map[model.NamespacedName][]string{}
		for _, e := range idx.entries {
			for _, from := range e.rule.From {
				hosts := idx.configHosts.byRule[from]
				if !slices.Contains(hosts, e.host) {
					idx.configHosts.byRule[from] = append(hosts, e.host)
				}
			}
		}
	})
	return idx.configHosts.byRule[rule]
}
