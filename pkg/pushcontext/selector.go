package pushcontext

import (
	"slices"
	"strings"

	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// workloadSelector is a DestinationRule's workloadSelector, keyed
// canonically so rules with equal selectors merge.
type workloadSelector struct {
	key    string
	labels map[string]string
	match  []labelPair
}

func newWorkloadSelector(labels map[string]string) *workloadSelector {
	return &workloadSelector{key: labelKey(labels), labels: labels, match: labelPairs(labels)}
}

// layerSelected computes, for every selector entry, the rule a selected
// proxy uses. Istio treats the selector-less rules for the same host in the
// same namespace as the parent of a selector rule: the selector rule's
// subsets come first and its traffic policy wins, and the parent fills in
// the rest. (Istio's own merge of the two is order dependent; this is the
// order-independent reading its maintainers describe.)
func (idx *ruleIndex) layerSelected() {
	for ns, selected := range idx.selected {
		parents := idx.local[ns]
		layer := func(entries []*ruleEntry) {
			for _, e := range entries {
				e.layered = &e.rule
				if parent := parents.exactly(e.host); parent != nil {
					e.layered = layerOver(e.rule, parent.rule)
				}
			}
		}
		for _, entries := range selected.exact {
			layer(entries)
		}
		for _, w := range selected.wildcards {
			layer(w.entries)
		}
	}
}

// exactly returns the first entry for exactly host (not one that merely
// matches it), nil if none.
func (h *hostRules) exactly(host string) *ruleEntry {
	if h == nil {
		return nil
	}
	if !isWildcard(host) {
		if entries := h.exact[host]; len(entries) > 0 {
			return entries[0]
		}
		return nil
	}
	for _, w := range h.wildcards {
		if w.host == host {
			return w.entries[0]
		}
	}
	return nil
}

// layerOver returns child with parent's subsets of other names appended and
// parent's traffic policy when child has none.
func layerOver(child, parent DestinationRule) *DestinationRule {
	spec := &networking.DestinationRule{
		Host:             child.Spec.Host,
		TrafficPolicy:    pick(child.Spec.TrafficPolicy, parent.Spec.TrafficPolicy),
		Subsets:          slices.Clip(child.Spec.Subsets),
		ExportTo:         child.Spec.ExportTo,
		WorkloadSelector: child.Spec.WorkloadSelector,
	}
	for _, s := range parent.Spec.Subsets {
		if !slices.ContainsFunc(spec.Subsets, func(have *networking.Subset) bool { return have.GetName() == s.GetName() }) {
			spec.Subsets = append(spec.Subsets, s)
		}
	}
	from := make([]model.NamespacedName, 0, len(child.From)+len(parent.From))
	return &DestinationRule{Spec: spec, From: append(append(from, child.From...), parent.From...)}
}

// matchSelected returns the entry of the most specific host matching host
// whose selector matches labels; nil if none. Among entries for one host,
// the oldest wins, as in Istio.
func (h *hostRules) matchSelected(host string, labels map[string]string) *ruleEntry {
	if h == nil {
		return nil
	}
	if e := firstSelecting(h.exact[host], labels); e != nil {
		return e
	}
	for i := range h.wildcards {
		if strings.HasSuffix(host, h.wildcards[i].suffix) {
			if e := firstSelecting(h.wildcards[i].entries, labels); e != nil {
				return e
			}
		}
	}
	return nil
}

func firstSelecting(entries []*ruleEntry, labels map[string]string) *ruleEntry {
	for _, e := range entries {
		if hasLabels(labels, e.selector.match) {
			return e
		}
	}
	return nil
}

// moreSpecific reports whether host pattern a is more specific than b: an
// exact host beats a wildcard, a longer wildcard beats a shorter one.
func moreSpecific(a, b string) bool {
	aWild, bWild := isWildcard(a), isWildcard(b)
	if aWild != bWild {
		return !aWild
	}
	return aWild && len(a) > len(b)
}

// DestinationRuleForProxy is DestinationRuleFor plus Istio's workloadSelector
// semantics. Rules with a workloadSelector apply only to proxies in their own
// namespace whose labels contain the selector's (an empty selector selects
// every proxy there). For a selected proxy, the selector rule for the most
// specific matching host is used, layered over the selector-less rule of
// that namespace for the same host: its subsets first, then the parent's
// other subsets; its traffic policy, else the parent's. A selector-less rule
// of the proxy's namespace for a more specific host still wins, and then the
// proxy sees what DestinationRuleFor gives. A proxy no selector picks sees
// exactly DestinationRuleFor. Shared result: never mutate it.
func (pc *PushContext) DestinationRuleForProxy(p *model.Proxy, host string) *DestinationRule {
	if p == nil {
		return nil
	}
	if selected := pc.rules.selected[p.Namespace]; selected != nil {
		if e := selected.matchSelected(host, p.Labels); e != nil {
			local := pc.rules.local[p.Namespace].match(host)
			if len(local) == 0 || !moreSpecific(local[0].host, e.host) {
				return e.layered
			}
		}
	}
	return pc.DestinationRuleFor(p.Namespace, host)
}

// HasWorkloadSelectorRules reports whether any rule in ns has a
// workloadSelector, that is, whether proxy labels can change what
// DestinationRuleForProxy returns for proxies in ns.
func (pc *PushContext) HasWorkloadSelectorRules(ns string) bool {
	return pc.rules.selected[ns] != nil
}
