package pushcontext

import (
	"cmp"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// ruleIndex holds the DestinationRules of every namespace, merged per host
// the way Istio merges them. It depends on DestinationRules only.
type ruleIndex struct {
	// local holds the rules of a namespace that are exported to it (no
	// exportTo, ".", "*" or its name): what proxies in that namespace see
	// of their own namespace's rules, as in Istio.
	local map[string]*hostRules
	// exported holds the rules of a namespace that other namespaces may see:
	// the same entries as local, without the private ones.
	exported map[string]*hostRules
	// rootPrivate holds the private rules of the root namespace, merged among
	// themselves only: the first place Istio looks for proxies in the root
	// namespace. It is a host index of its own, so a private wildcard there
	// is not shadowed by a more specific public rule.
	rootPrivate *hostRules
	// selected holds, per namespace, the rules with a workloadSelector,
	// merged per host and selector. Istio keeps them to their own namespace:
	// they apply only to proxies there whose labels the selector matches,
	// whatever their exportTo.
	selected map[string]*hostRules
	// entries lists the merged entries of local and selected, in creation
	// order.
	entries []*ruleEntry
	// configs counts the DestinationRules that were indexed.
	configs int
	// sources are the DestinationRules as the store gave them, for telling
	// which changed between two indexes (unannouncedRules).
	sources []*model.Config
	// failoverLabels: see PushContext.FailoverPriorityLabels.
	failoverLabels []string

	configHosts configHosts
	// passthroughHosts are the hosts (wildcards kept) of the rules that set
	// loadBalancer PASSTHROUGH somewhere: only their services have
	// original-destination clusters, whose mutual TLS follows endpoints.
	passthroughHosts []string

	subsetsExact    map[string][]subsetSpec
	subsetsWildcard []wildcardSubsets
	problems        []Problem
}

// ruleEntry is one merged DestinationRule for one host in one namespace.
// Rules for the same host whose exportTo differ stay separate entries.
type ruleEntry struct {
	rule      DestinationRule
	namespace string
	host      string
	exportTo  exportSet
	// owned is set once Spec is this entry's own copy, safe to append to
	// while the index is being built.
	owned bool
	// selector is set on entries of rules with a workloadSelector; then
	// layered is the rule a selected proxy uses: rule over the selector-less
	// rule of the same namespace for the same host.
	selector *workloadSelector
	layered  *DestinationRule
}

// hostRules finds the entries for a host: an exact host beats a wildcard,
// and the longest matching wildcard wins.
type hostRules struct {
	exact     map[string][]*ruleEntry
	wildcards []wildcardRules // most specific first once built
}

type wildcardRules struct {
	host    string
	suffix  string // the host without its leading "*"
	entries []*ruleEntry
}

// subsetSpec is one label set that some subset selects, keyed canonically.
type subsetSpec struct {
	key    string
	labels map[string]string
	match  []labelPair // labels, as a list to test endpoints against
}

type wildcardSubsets struct {
	suffix  string
	subsets []subsetSpec
}

func (h *hostRules) match(host string) []*ruleEntry {
	if h == nil {
		return nil
	}
	if entries, ok := h.exact[host]; ok {
		return entries
	}
	for i := range h.wildcards {
		if strings.HasSuffix(host, h.wildcards[i].suffix) {
			return h.wildcards[i].entries
		}
	}
	return nil
}

// exportSet is a normalised exportTo: sorted, unique namespace names, with
// "*" standing for every namespace. Empty means no namespace at all.
type exportSet []string

// exportPublic is the default exportTo. It is shared and never modified.
var exportPublic = exportSet{model.ExportToAll}

func newExportSet(raw []string, own string) exportSet {
	if len(raw) == 0 || (len(raw) == 1 && raw[0] == model.ExportToAll) {
		return exportPublic
	}
	out := make(exportSet, 0, len(raw))
	for _, entry := range raw {
		if ns := exportedNamespace(entry, own); ns != "" {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (e exportSet) allows(ns string) bool {
	for _, n := range e {
		if n == model.ExportToAll || n == ns {
			return true
		}
	}
	return false
}

// privateTo reports whether no namespace other than own may see the rule.
func (e exportSet) privateTo(own string) bool {
	return len(e) == 0 || (len(e) == 1 && e[0] == own)
}

func (e exportSet) supersetOf(o exportSet) bool {
	for _, n := range o {
		if _, found := slices.BinarySearch(e, n); !found {
			return false
		}
	}
	return true
}

// resolveHost turns a short host into a fully qualified one in the rule's
// namespace, as Istio does; wildcards, FQDNs and IPs are kept.
func resolveHost(host, namespace, domainSuffix string) string {
	if host == "" || host == "*" || strings.ContainsAny(host, ".:") {
		return host
	}
	return host + "." + namespace + ".svc." + domainSuffix
}

func isWildcard(host string) bool { return strings.HasPrefix(host, "*") }

func buildRuleIndex(configs []*model.Config, opts Options) *ruleIndex {
	idx := &ruleIndex{local: map[string]*hostRules{}, failoverLabels: failoverPriorityLabels(configs), sources: configs}
	wildcardPos := map[*hostRules]map[string]int{} // wildcard host -> position, while building
	rootPrivate := map[string]*hostRules{}
	hostsOf := func(byNamespace map[string]*hostRules, ns string) *hostRules {
		h := byNamespace[ns]
		if h == nil {
			h = &hostRules{exact: map[string][]*ruleEntry{}}
			byNamespace[ns] = h
			wildcardPos[h] = map[string]int{}
		}
		return h
	}
	for _, cfg := range configs {
		spec, ok := cfg.Spec.(*networking.DestinationRule)
		switch {
		case !ok || spec == nil:
			idx.problems = append(idx.problems, ruleProblem(cfg, "spec is not a DestinationRule; ignored"))
			continue
		case spec.Host == "":
			idx.problems = append(idx.problems, ruleProblem(cfg, "host is empty; ignored"))
			continue
		}
		idx.configs++
		from := model.NamespacedName{Namespace: cfg.Namespace, Name: cfg.Name}
		host := resolveHost(spec.Host, cfg.Namespace, opts.DomainSuffix)
		if MentionsPassthrough(spec) {
			idx.passthroughHosts = append(idx.passthroughHosts, host)
		}
		var e *ruleEntry
		if spec.WorkloadSelector != nil {
			if idx.selected == nil {
				idx.selected = map[string]*hostRules{}
			}
			h := hostsOf(idx.selected, cfg.Namespace)
			e = h.addSelected(wildcardPos[h], from, spec, host, newWorkloadSelector(spec.WorkloadSelector.MatchLabels), &idx.problems)
		} else {
			exportTo := newExportSet(spec.ExportTo, cfg.Namespace)
			h := hostsOf(idx.local, cfg.Namespace)
			e = h.add(wildcardPos[h], from, spec, host, exportTo, &idx.problems)
			if cfg.Namespace == opts.RootNamespace && exportTo.privateTo(cfg.Namespace) && exportTo.allows(cfg.Namespace) {
				// Its problems are the ones local already reported.
				h := hostsOf(rootPrivate, cfg.Namespace)
				h.add(wildcardPos[h], from, spec, host, exportTo, new([]Problem))
			}
		}
		if e != nil {
			e.namespace = cfg.Namespace
			idx.entries = append(idx.entries, e)
		}
	}
	for h := range wildcardPos {
		slices.SortFunc(h.wildcards, func(a, b wildcardRules) int {
			return cmp.Or(cmp.Compare(len(b.host), len(a.host)), cmp.Compare(a.host, b.host))
		})
	}
	idx.rootPrivate = rootPrivate[opts.RootNamespace]
	idx.exported = make(map[string]*hostRules, len(idx.local))
	for ns, h := range idx.local {
		if exported := h.withoutPrivate(ns); exported != nil {
			idx.exported[ns] = exported
		}
		// Only now, since the exported rules are taken from every rule.
		if own := h.exportedTo(ns); own != nil {
			idx.local[ns] = own
		} else {
			delete(idx.local, ns)
		}
	}
	idx.layerSelected()
	idx.indexSubsets()
	return idx
}

// withoutPrivate returns the entries other namespaces may see: h itself
// when it has no private entries, nil when it has nothing else.
//
// Merging the exported rules on their own would give the same entries: a
// rule only merges into an entry whose exportTo it equals or contains, and
// a non-private rule can never be contained in a private one's, so the
// non-private entries of a namespace never absorb private rules.
func (h *hostRules) withoutPrivate(ns string) *hostRules {
	return h.filter(func(e *ruleEntry) bool { return !e.exportTo.privateTo(ns) })
}

// exportedTo returns the entries of namespace ns that ns itself may see:
// h itself when that is all of them, nil when none. Istio leaves a rule
// whose exportTo names other namespaces only (or "~") out of its own
// namespace's lookup. By the argument above, such a rule never merges
// into an entry its namespace sees, so filtering gives what merging those
// entries alone would.
func (h *hostRules) exportedTo(ns string) *hostRules {
	return h.filter(func(e *ruleEntry) bool { return e.exportTo.allows(ns) })
}

// filter returns the entries that keep accepts: h itself when it accepts
// them all, nil when it accepts none.
func (h *hostRules) filter(keepEntry func(*ruleEntry) bool) *hostRules {
	keep := func(entries []*ruleEntry) []*ruleEntry {
		if !slices.ContainsFunc(entries, func(e *ruleEntry) bool { return !keepEntry(e) }) {
			return entries
		}
		var out []*ruleEntry
		for _, e := range entries {
			if keepEntry(e) {
				out = append(out, e)
			}
		}
		return out
	}
	out := &hostRules{exact: make(map[string][]*ruleEntry, len(h.exact))}
	changed := false
	for host, entries := range h.exact {
		kept := keep(entries)
		changed = changed || len(kept) != len(entries)
		if len(kept) > 0 {
			out.exact[host] = kept
		}
	}
	for _, w := range h.wildcards {
		kept := keep(w.entries)
		changed = changed || len(kept) != len(w.entries)
		if len(kept) > 0 {
			out.wildcards = append(out.wildcards, wildcardRules{host: w.host, suffix: w.suffix, entries: kept})
		}
	}
	switch {
	case !changed:
		return h
	case len(out.exact) == 0 && len(out.wildcards) == 0:
		return nil
	}
	return out
}

// add merges one rule into the entries for its host, following Istio's
// enhanced merge: a rule joins every entry with the same exportTo, and also
// every entry whose exportTo its own strictly contains (while still standing
// alone for the namespaces only it reaches). It returns the new entry, if
// the rule became one.
func (h *hostRules) add(wildcardPos map[string]int, from model.NamespacedName, spec *networking.DestinationRule,
	host string, exportTo exportSet, problems *[]Problem,
) *ruleEntry {
	entries := h.entriesFor(wildcardPos, host)
	separate := true
	for _, e := range entries {
		switch {
		case slices.Equal(e.exportTo, exportTo):
			separate = false
			e.merge(from, spec, problems)
		case len(e.exportTo) > 0 && exportTo.supersetOf(e.exportTo):
			e.merge(from, spec, problems)
		}
	}
	if !separate {
		return nil
	}
	e := newRuleEntry(from, spec, host)
	e.exportTo = exportTo
	h.insert(wildcardPos, e)
	return e
}

// addSelected merges a rule with a workloadSelector into the entry for its
// host with an equal selector, as Istio merges such rules, or makes it a new
// entry, which it returns. Selector rules never merge into selector-less
// ones or the other way round here: a proxy that a selector picks gets the
// selector entry layered over the selector-less one (see layerOver).
func (h *hostRules) addSelected(wildcardPos map[string]int, from model.NamespacedName, spec *networking.DestinationRule,
	host string, selector *workloadSelector, problems *[]Problem,
) *ruleEntry {
	for _, e := range h.entriesFor(wildcardPos, host) {
		if e.selector.key == selector.key {
			e.merge(from, spec, problems)
			return nil
		}
	}
	e := newRuleEntry(from, spec, host)
	e.exportTo = exportSet{} // selector rules are for their own namespace only
	e.selector = selector
	h.insert(wildcardPos, e)
	return e
}

func newRuleEntry(from model.NamespacedName, spec *networking.DestinationRule, host string) *ruleEntry {
	e := &ruleEntry{host: host}
	e.rule.Spec = spec
	e.rule.From = []model.NamespacedName{from}
	if spec.Host != host {
		// Keep Spec.Host fully qualified, like the index key.
		e.own()
	}
	return e
}

// entriesFor returns the entries already indexed for exactly host.
func (h *hostRules) entriesFor(wildcardPos map[string]int, host string) []*ruleEntry {
	if !isWildcard(host) {
		return h.exact[host]
	}
	if p, ok := wildcardPos[host]; ok {
		return h.wildcards[p].entries
	}
	return nil
}

// insert appends a new entry after the existing ones for its host.
func (h *hostRules) insert(wildcardPos map[string]int, e *ruleEntry) {
	if !isWildcard(e.host) {
		h.exact[e.host] = append(h.exact[e.host], e)
		return
	}
	if p, ok := wildcardPos[e.host]; ok {
		h.wildcards[p].entries = append(h.wildcards[p].entries, e)
		return
	}
	wildcardPos[e.host] = len(h.wildcards)
	h.wildcards = append(h.wildcards, wildcardRules{host: e.host, suffix: e.host[1:], entries: []*ruleEntry{e}})
}

// own replaces the shared Spec with a shallow copy this entry may change.
// Nested messages stay shared: merging only appends subsets and fills the
// top-level traffic policy, and never changes a nested message.
func (e *ruleEntry) own() {
	if e.owned {
		return
	}
	shared := e.rule.Spec
	e.rule.Spec = &networking.DestinationRule{
		Host:             e.host,
		TrafficPolicy:    shared.TrafficPolicy,
		Subsets:          slices.Clone(shared.Subsets),
		ExportTo:         shared.ExportTo,
		WorkloadSelector: shared.WorkloadSelector,
	}
	e.owned = true
}

func (e *ruleEntry) merge(from model.NamespacedName, spec *networking.DestinationRule, problems *[]Problem) {
	e.own()
	merged := e.rule.Spec
	for _, s := range spec.Subsets {
		if slices.ContainsFunc(merged.Subsets, func(have *networking.Subset) bool { return have.GetName() == s.GetName() }) {
			*problems = append(*problems, Problem{
				Kind:      model.KindDestinationRule.String(),
				Namespace: from.Namespace,
				Name:      from.Name,
				Message: "subset " + s.GetName() + " is already defined by an older rule for host " +
					e.host + " merged from " + e.rule.From[0].String() + "; dropped",
			})
			continue
		}
		merged.Subsets = append(merged.Subsets, s)
	}
	if merged.TrafficPolicy == nil {
		merged.TrafficPolicy = spec.TrafficPolicy
	}
	e.rule.From = append(e.rule.From, from)
}

// indexSubsets collects, per host, every label set that a subset of any rule
// in any namespace selects, so endpoint entries can precompute them.
func (idx *ruleIndex) indexSubsets() {
	idx.subsetsExact = map[string][]subsetSpec{}
	wildcard := map[string][]subsetSpec{}
	for _, e := range idx.entries {
		for _, s := range e.rule.Spec.Subsets {
			if len(s.GetLabels()) == 0 {
				continue // selects every endpoint: the unfiltered lists serve it
			}
			spec := subsetSpec{key: labelKey(s.Labels), labels: s.Labels, match: labelPairs(s.Labels)}
			if isWildcard(e.host) {
				wildcard[e.host] = append(wildcard[e.host], spec)
			} else {
				idx.subsetsExact[e.host] = append(idx.subsetsExact[e.host], spec)
			}
		}
	}
	for host, list := range idx.subsetsExact {
		idx.subsetsExact[host] = sortSubsets(list)
	}
	for host, list := range wildcard {
		idx.subsetsWildcard = append(idx.subsetsWildcard, wildcardSubsets{suffix: host[1:], subsets: sortSubsets(list)})
	}
	slices.SortFunc(idx.subsetsWildcard, func(a, b wildcardSubsets) int { return cmp.Compare(a.suffix, b.suffix) })
}

// subsetsFor returns the label sets that subsets for host select, sorted by
// key. The result may be shared.
func (idx *ruleIndex) subsetsFor(host string) []subsetSpec {
	exact := idx.subsetsExact[host]
	var combined []subsetSpec
	for i := range idx.subsetsWildcard {
		w := &idx.subsetsWildcard[i]
		if !strings.HasSuffix(host, w.suffix) {
			continue
		}
		if combined == nil {
			combined = append(slices.Clone(exact), w.subsets...)
		} else {
			combined = append(combined, w.subsets...)
		}
	}
	if combined == nil {
		return exact
	}
	return sortSubsets(combined)
}

func sortSubsets(list []subsetSpec) []subsetSpec {
	slices.SortFunc(list, func(a, b subsetSpec) int { return cmp.Compare(a.key, b.key) })
	return slices.CompactFunc(list, func(a, b subsetSpec) bool { return a.key == b.key })
}

func ruleProblem(cfg *model.Config, msg string) Problem {
	return Problem{Kind: model.KindDestinationRule.String(), Namespace: cfg.Namespace, Name: cfg.Name, Message: msg}
}
