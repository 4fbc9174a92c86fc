package pushcontext

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// serviceIndex finds services by hostname and name, and answers which
// services a namespace may see. Services are identified across the other
// indexes by their position in all.
type serviceIndex struct {
	all    []*model.Service // sorted by hostname, hostnames unique
	byHost map[string]int32
	byName map[model.NamespacedName]int32
	// public holds the services every namespace sees. Most namespaces see
	// exactly this list, so it is shared rather than copied per namespace.
	public []*model.Service
	// restricted holds, only for namespaces that some non-public service is
	// exported to, the public services merged with those extra services.
	restricted map[string][]*model.Service
	problems   []Problem
	aliases    *aliasIndex
}

// sees reports whether namespace ns sees the service with hostname host.
func (s *serviceIndex) sees(ns, host string) bool {
	_, found := slices.BinarySearchFunc(s.visibleTo(ns), host, func(svc *model.Service, h string) int {
		return strings.Compare(svc.Hostname, h)
	})
	return found
}

func (s *serviceIndex) visibleTo(ns string) []*model.Service {
	if list, ok := s.restricted[ns]; ok {
		return list
	}
	return s.public
}

func buildServiceIndex(services []*model.Service) *serviceIndex {
	idx := indexByHostname(services)
	idx.aliases = buildAliasIndex(idx)
	return idx
}

func indexByHostname(services []*model.Service) *serviceIndex {
	byHostname := func(a, b *model.Service) int { return cmp.Compare(a.Hostname, b.Hostname) }
	if !slices.IsSortedFunc(services, byHostname) {
		services = slices.Clone(services)
		slices.SortStableFunc(services, byHostname)
	}
	idx := &serviceIndex{
		all:    make([]*model.Service, 0, len(services)),
		byHost: make(map[string]int32, len(services)),
		byName: make(map[model.NamespacedName]int32, len(services)),
	}
	publicCount := 0
	for _, svc := range services {
		switch {
		case svc == nil:
			continue
		case svc.Hostname == "":
			idx.problems = append(idx.problems, serviceProblem(svc, "service has no hostname; ignored"))
			continue
		case svc.IsExternalName():
			if msg := externalNameProblem(svc.ExternalName); msg != "" {
				idx.problems = append(idx.problems, serviceProblem(svc, msg))
				continue
			}
		}
		if _, dup := idx.byHost[svc.Hostname]; dup {
			idx.problems = append(idx.problems, serviceProblem(svc,
				"hostname "+svc.Hostname+" is already used by another service; ignored"))
			continue
		}
		ord := int32(len(idx.all))
		idx.all = append(idx.all, svc)
		idx.byHost[svc.Hostname] = ord
		idx.byName[svc.Key()] = ord
		if svc.ExportTo.Public() {
			publicCount++
		}
	}

	idx.public = idx.all
	if publicCount == len(idx.all) {
		return idx
	}
	idx.public = make([]*model.Service, 0, publicCount)
	extra := map[string][]*model.Service{}
	for _, svc := range idx.all {
		if svc.ExportTo.Public() {
			idx.public = append(idx.public, svc)
			continue
		}
		for _, ns := range svc.ExportTo {
			ns = exportedNamespace(ns, svc.Namespace)
			if ns == "" {
				continue
			}
			list := extra[ns]
			// The same namespace listed twice must not add the service twice;
			// services arrive in order, so a repeat is always the last one.
			if n := len(list); n > 0 && list[n-1] == svc {
				continue
			}
			extra[ns] = append(list, svc)
		}
	}
	idx.restricted = make(map[string][]*model.Service, len(extra))
	for ns, list := range extra {
		idx.restricted[ns] = mergeByHostname(idx.public, list)
	}
	return idx
}

// exportedNamespace maps one ExportTo entry to the namespace it names, or ""
// for none. Conversion should already have resolved "." but a literal one is
// honoured here too, so a missed conversion cannot hide a service from its
// own namespace.
func exportedNamespace(entry, own string) string {
	switch entry {
	case ".":
		return own
	case "~", "":
		return ""
	}
	return entry
}

// mergeByHostname merges two hostname-sorted lists without duplicates
// between them into a new sorted list.
func mergeByHostname(a, b []*model.Service) []*model.Service {
	out := make([]*model.Service, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if a[i].Hostname < b[j].Hostname {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

func serviceProblem(svc *model.Service, msg string) Problem {
	return Problem{Kind: model.KindService.String(), Namespace: svc.Namespace, Name: svc.Name, Message: msg}
}

// externalNameProblem says why proxies cannot resolve an ExternalName
// service's name, "" when they can. The Kubernetes API admits only a
// DNS-1123 subdomain, optionally with a trailing dot. A file may spell one
// in upper case, which DNS ignores, or hold anything: a name like
// "host:443" or "https://host" would have Envoy resolve a host that does
// not exist and grpc-go reject the cluster. Such a service is left out of
// the index, so that no generator refers to it.
func externalNameProblem(name string) string {
	msgs := validation.IsDNS1123Subdomain(aliasName(name))
	if len(msgs) == 0 {
		return ""
	}
	return fmt.Sprintf("spec.externalName %q is not a DNS name (%s); ignored", name, strings.Join(msgs, "; "))
}

// UnannouncedServices lists the services whose stored object differs
// between prev and pc although req does not name them. The store is
// readable before its change handlers run, so a build that re-reads the
// Services (for a change req does name) can read a later write too: a
// deleted Service, or one no longer exported to a namespace, is then
// already gone from the snapshot that the push of its own announcement
// compares with, and that push would tell none of the proxies that saw it.
// The store replaces a Service with a new object on every write, so a new
// pointer is a change (a rewrite of the same content, at worst a spare
// push). Both lists are sorted by hostname; a reused index costs nothing.
// RuleChanges does the same for DestinationRules.
func (pc *PushContext) UnannouncedServices(prev *PushContext, req *model.PushRequest) []*model.Service {
	if prev.services == pc.services {
		return nil
	}
	before, after := prev.services.all, pc.services.all
	var out []*model.Service
	note := func(svc *model.Service) {
		if _, ok := req.ConfigsUpdated[model.ConfigKey{Kind: model.KindService, Namespace: svc.Namespace, Name: svc.Name}]; !ok {
			out = append(out, svc)
		}
	}
	i, j := 0, 0
	for i < len(before) || j < len(after) {
		switch {
		case j == len(after) || (i < len(before) && before[i].Hostname < after[j].Hostname):
			note(before[i])
			i++
		case i == len(before) || after[j].Hostname < before[i].Hostname:
			note(after[j])
			j++
		default:
			if before[i] != after[j] {
				note(after[j])
			}
			i++
			j++
		}
	}
	return out
}
