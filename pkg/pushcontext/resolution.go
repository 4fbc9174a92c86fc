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
// host. The lookup order is Istio's: first the rules of the proxy's own
// namespace that are exported to it (no exportTo, ".", "*" or its name; a
// rule exported only to other namespaces is not its own namespace's), then
// the rules exported to it from the service's namespace, then those
// exported to it from the root namespace. For a proxy in the root
// namespace the first step looks only at that namespace's private rules:
// its public rules are often catch-alls meant for the whole mesh, and must
// not shadow the service's own rules. The result is shared: never mutate
// it. nil if no rule applies.
func (pc *PushContext) DestinationRuleFor(proxyNamespace, host string) *DestinationRule {
	rules, root := pc.rules, pc.opts.RootNamespace
	own := rules.local[proxyNamespace]
	if proxyNamespace == root {
		own = rules.rootPrivate
	}
	if entries := own.match(host); len(entries) > 0 {
		return &entries[0].rule
	}
	var fromService, fromRoot []*ruleEntry
	if ord, ok := pc.services.byHost[host]; ok {
		res := &pc.resolution.byService[ord]
		// A proxy in the service's own namespace has seen that namespace's
		// rules above; in the root namespace, its public ones come next.
		if pc.services.all[ord].Namespace != proxyNamespace {
			fromService = res.serviceNamespace
		}
		fromRoot = res.root
	} else {
		fromRoot = rules.exported[root].match(host)
	}
	if e := firstVisible(fromService, proxyNamespace); e != nil {
		return &e.rule
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
