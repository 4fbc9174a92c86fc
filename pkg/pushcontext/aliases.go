package pushcontext

import (
	"fmt"
	"slices"
	"strings"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// An ExternalName Service whose name is the hostname of another Service of
// the mesh is an alias of that Service, as in Istio since 1.21
// (ENABLE_EXTERNAL_NAME_ALIAS). Cluster DNS answers the alias with a CNAME
// to the target's hostname, so its clients connect to the target's cluster
// IP; served as a DNS service of its own, they would reach it in plaintext
// (which a STRICT destination refuses) and around the target's
// DestinationRules. As an alias they are routed as the target's clients:
// the alias's names join the target's virtual hosts, and the alias has no
// cluster and no listener of its own (its ports do not matter, as in
// Kubernetes). A name that leads to no Service of the mesh keeps the DNS
// service.

// maxAliasHops bounds a chain of aliases (an alias of an alias ...). Each
// hop is a CNAME cluster DNS follows; real chains are one or two long, and
// the bound keeps a pathological configuration linear to resolve.
const maxAliasHops = 8

// aliasIndex is the resolved alias graph. It depends on Services only and
// is built with the service index.
type aliasIndex struct {
	// target maps an alias's hostname to the Service its chain ends at.
	target map[string]*model.Service
	// of maps a target's hostname to its aliases, sorted by hostname.
	of map[string][]*model.Service
	// readers maps every hostname a resolution looked up (each hop, found
	// or not) to the ExternalName Services whose resolution read it: a
	// change of a Service with that hostname may change what they are.
	readers map[string][]*model.Service
}

// aliasName is the hostname an external name may be: DNS names are
// case-insensitive, and a trailing dot only makes the name absolute.
func aliasName(externalName string) string {
	return strings.ToLower(strings.TrimSuffix(externalName, "."))
}

// buildAliasIndex resolves every ExternalName Service of idx. Services are
// walked in hostname order, so the maps' slices come out sorted. A chain
// that loops or is too long is reported and leaves its members DNS
// services: cluster DNS gives such a name no address either.
func buildAliasIndex(idx *serviceIndex) *aliasIndex {
	a := &aliasIndex{}
	for _, svc := range idx.all {
		if !svc.IsExternalName() {
			continue
		}
		target, read, problem := idx.resolveAlias(svc)
		if a.readers == nil {
			a.target, a.of, a.readers = map[string]*model.Service{}, map[string][]*model.Service{}, map[string][]*model.Service{}
		}
		for _, h := range read {
			a.readers[h] = append(a.readers[h], svc)
		}
		if problem != "" {
			idx.problems = append(idx.problems, serviceProblem(svc, problem))
		}
		if target != nil {
			a.target[svc.Hostname] = target
			a.of[target.Hostname] = append(a.of[target.Hostname], svc)
		}
	}
	return a
}

// resolveAlias follows svc's name through other ExternalName Services to a
// Service that has none. It returns that Service (nil when the chain leaves
// the mesh, loops or is too long), the hostnames it looked up, and what is
// wrong with the chain, if anything.
func (idx *serviceIndex) resolveAlias(svc *model.Service) (*model.Service, []string, string) {
	read := make([]string, 0, 1)
	for cur := svc; len(read) < maxAliasHops; {
		name := aliasName(cur.ExternalName)
		if name == svc.Hostname || slices.Contains(read, name) {
			return nil, read, fmt.Sprintf(
				"spec.externalName %q leads back to %s through ExternalName Services (cluster DNS gives it no address); served as a DNS service",
				svc.ExternalName, name)
		}
		read = append(read, name)
		i, ok := idx.byHost[name]
		if !ok {
			return nil, read, ""
		}
		if cur = idx.all[i]; !cur.IsExternalName() {
			return cur, read, ""
		}
	}
	return nil, read, fmt.Sprintf(
		"spec.externalName %q leads through more than %d ExternalName Services; served as a DNS service", svc.ExternalName, maxAliasHops)
}

// AliasTarget returns the Service that svc is an alias of for proxies in
// namespace ns; nil when svc is no alias there: not an ExternalName
// Service, its name leads to no Service of the mesh, or ns does not see
// that Service (its proxies could not route to it, and keep svc's DNS
// cluster).
func (pc *PushContext) AliasTarget(ns string, svc *model.Service) *model.Service {
	return pc.services.aliasTarget(ns, svc)
}

func (idx *serviceIndex) aliasTarget(ns string, svc *model.Service) *model.Service {
	if svc == nil || !svc.IsExternalName() {
		return nil
	}
	t := idx.aliases.target[svc.Hostname]
	if t == nil || !idx.sees(ns, t.Hostname) {
		return nil
	}
	return t
}

// AliasesOf returns the aliases of target that namespace ns sees, sorted by
// hostname; nil when there are none. The slice may be shared: never mutate
// it.
func (pc *PushContext) AliasesOf(ns string, target *model.Service) []*model.Service {
	all := pc.services.aliases.of[target.Hostname]
	if len(all) == 0 {
		return nil
	}
	if !slices.ContainsFunc(all, func(a *model.Service) bool { return !pc.services.sees(ns, a.Hostname) }) {
		return all
	}
	var out []*model.Service
	for _, a := range all {
		if pc.services.sees(ns, a.Hostname) {
			out = append(out, a)
		}
	}
	return out
}

// AliasesReading returns the ExternalName Services whose resolution looked
// up host, found or not: adding, changing or deleting a Service with that
// hostname may make them aliases, change their target's ports, or make
// them DNS services again, so their clients must be pushed too.
func (pc *PushContext) AliasesReading(host string) []*model.Service {
	return pc.services.aliases.readers[host]
}
