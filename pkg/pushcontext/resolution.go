package pushcontext

// resolutionIndex precomputes, per service, the parts of the destination
// rule lookup that do not depend on the proxy: the exported rules for the
// service's host in its own namespace and in the root namespace, and the
// subset label sets that rules anywhere define for it. It depends on both
// services and rules; byService is aligned with serviceIndex.all.
type resolutionIndex struct {
	byService []hostResolution
}

type hostResolution struct {
	serviceNamespace []*ruleEntry
	root             []*ruleEntry
	subsets          []subsetSpec // sorted by key; shared
}

func buildResolutionIndex(services *serviceIndex, rules *ruleIndex, rootNamespace string) *resolutionIndex {
	idx := &resolutionIndex{byService: make([]hostResolution, len(services.all))}
	rootRules := rules.exported[rootNamespace]
	for i, svc := range services.all {
		res := &idx.byService[i]
		res.serviceNamespace = rules.exported[svc.Namespace].match(svc.Hostname)
		res.root = rootRules.match(svc.Hostname)
		res.subsets = rules.subsetsFor(svc.Hostname)
	}
	return idx
}

// DestinationRuleFor resolves the rule a proxy in proxyNamespace uses for
// host. The lookup order is Istio's: rules in the proxy's namespace (all of
// them, whatever their exportTo), then rules exported from the service's
// namespace, then rules exported from the root namespace. A proxy in the root
// namespace looks in the service's namespace first, so that catch-all rules
// in the root namespace do not shadow service-specific ones (Istio does the
// same). The result is shared: never mutate it. nil if no rule applies.
func (pc *PushContext) DestinationRuleFor(proxyNamespace, host string) *DestinationRule {
	rules, root := pc.rules, pc.opts.RootNamespace
	if proxyNamespace != root {
		if entries := rules.local[proxyNamespace].match(host); len(entries) > 0 {
			return &entries[0].rule
		}
	}
	var fromService, fromRoot []*ruleEntry
	if ord, ok := pc.services.byHost[host]; ok {
		res := &pc.resolution.byService[ord]
		// A proxy in the service's own namespace has already seen all of
		// that namespace's rules above.
		if pc.services.all[ord].Namespace != proxyNamespace || proxyNamespace == root {
			fromService = res.serviceNamespace
		}
		fromRoot = res.root
	} else {
		fromRoot = rules.exported[root].match(host)
	}
	if e := firstVisible(fromService, proxyNamespace); e != nil {
		return &e.rule
	}
	if proxyNamespace == root {
		if entries := rules.local[root].match(host); len(entries) > 0 {
			return &entries[0].rule
		}
		return nil
	}
	if e := firstVisible(fromRoot, proxyNamespace); e != nil {
		return &e.rule
	}
	return nil
}

func firstVisible(entries []*ruleEntry, ns string) *ruleEntry {
	for _, e := range entries {
		if e.exportTo.allows(ns) {
			return e
		}
	}
	return nil
}
