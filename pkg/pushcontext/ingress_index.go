package pushcontext

import (
	"maps"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// ingressIndex is what the ingress gateway serves, merged from the owned
// Ingresses, with the per-Ingress translations it was merged from so the
// next build can reuse them. It depends on Ingresses, IngressClasses,
// Secrets, the Services the Ingresses name, and the gateway Service.
type ingressIndex struct {
	gateway  *IngressGateway
	problems map[model.NamespacedName][]string
	// secrets are the Secrets that gateway.TLS references.
	secrets map[model.NamespacedName]*model.Secret

	// translations holds every owned Ingress's translation by key.
	translations map[model.NamespacedName]*ingressTranslation
	// verdicts say which Secrets hold a usable key pair, so that a Secret
	// is parsed once, not once per build.
	verdicts map[model.NamespacedName]secretVerdict
	// hosts are the merged virtual hosts, reused by the next build for
	// every host whose routes did not change; hostOrder is their order.
	hosts     map[string]*hostMerge
	hostOrder []string
	// reads is every Service a translation looked up, found or not, and
	// the gateway Service; aliasReads every hostname that resolving an
	// ExternalName backend looked up. A change to any other Service cannot
	// matter here.
	reads      map[model.NamespacedName]struct{}
	aliasReads map[string]struct{}

	owned, ignored int
}

// readsAnyService reports whether the index depends on one of the changed
// services, which were in before or are in after (or both).
func (idx *ingressIndex) readsAnyService(changed []model.NamespacedName, before, after *serviceIndex) bool {
	for _, n := range changed {
		if _, ok := idx.reads[n]; ok {
			return true
		}
		if len(idx.aliasReads) == 0 {
			continue
		}
		for _, services := range []*serviceIndex{before, after} {
			if i, ok := services.byName[n]; ok {
				if _, read := idx.aliasReads[services.all[i].Hostname]; read {
					return true
				}
			}
		}
	}
	return false
}

// ingressChecks say which inputs of cached translations may have changed
// since the previous build and must be compared with what they read.
type ingressChecks struct {
	services, secrets bool
}

func buildIngressIndex(store model.Store, opts IngressOptions, services *serviceIndex, prev *ingressIndex, checks ingressChecks, info *BuildInfo) *ingressIndex {
	if prev == nil {
		prev = &ingressIndex{}
	}
	classes := store.IngressClasses()
	all := store.Ingresses()
	idx := &ingressIndex{
		translations: make(map[model.NamespacedName]*ingressTranslation, len(prev.translations)),
	}
	// Reused translations read what they read before, so the previous set
	// only needs the newly translated ones added. It may keep Services that
	// nothing reads any more; that costs at most a needless rebuild of this
	// index, and a build that checks everything starts the set afresh.
	reuseReads := prev.reads != nil && !(checks.services && checks.secrets)
	if reuseReads {
		idx.reads, idx.aliasReads = maps.Clone(prev.reads), maps.Clone(prev.aliasReads)
	} else {
		idx.reads = map[model.NamespacedName]struct{}{}
	}
	idx.reads[opts.GatewayService] = struct{}{}
	tr := &ingressTranslator{services: services, secrets: newSecretChecker(store, prev.verdicts), gatewayNamespace: opts.GatewayService.Namespace}
	owned := make([]*ingressTranslation, 0, len(all))
	for _, ing := range all {
		if !opts.Ownership.Owns(ing, classes) {
			idx.ignored++
			continue
		}
		t := prev.translations[ing.Key()]
		if t != nil && t.stillValid(ing, tr, store, checks) {
			for _, d := range t.secrets {
				tr.secrets.carry(d.name)
			}
			info.IngressesReused++
			if !reuseReads {
				t.addReads(idx)
			}
		} else {
			t = tr.translate(ing)
			info.IngressesTranslated++
			t.addReads(idx)
		}
		idx.translations[t.key] = t
		owned = append(owned, t)
	}
	idx.owned = len(owned)
	idx.verdicts = tr.secrets.cur

	m := mergeIngresses(owned, prev.hosts, prev.hostOrder)
	idx.problems, idx.hosts, idx.hostOrder = m.problems, m.hosts, m.order
	var gatewaySvc *model.Service
	if i, ok := services.byName[opts.GatewayService]; ok {
		gatewaySvc = services.all[i]
	}
	if gatewaySvc == nil || len(owned) == 0 {
		return idx
	}
	idx.gateway = &IngressGateway{
		HTTPPort:  gatewayListenPort(gatewaySvc, 80),
		HTTPSPort: gatewayListenPort(gatewaySvc, 443),
		HTTP:      m.http,
		TLS:       m.tls,
	}
	idx.secrets = make(map[model.NamespacedName]*model.Secret, len(m.tls))
	for _, h := range m.tls {
		idx.secrets[h.Secret] = idx.verdicts[h.Secret].secret
	}
	return idx
}

func (t *ingressTranslation) addReads(idx *ingressIndex) {
	for _, d := range t.services {
		idx.reads[d.name] = struct{}{}
	}
	if len(t.aliasReads) > 0 && idx.aliasReads == nil {
		idx.aliasReads = make(map[string]struct{}, len(t.aliasReads))
	}
	for _, h := range t.aliasReads {
		idx.aliasReads[h] = struct{}{}
	}
}

// stillValid reports whether a cached translation can stand for ing: the
// same object (or revision), and the same Services and Secrets behind it,
// aliases of the same targets.
func (t *ingressTranslation) stillValid(ing *model.Ingress, tr *ingressTranslator, store model.Store, checks ingressChecks) bool {
	if t.ingress != ing && (ing.Revision == "" || ing.Revision != t.ingress.Revision) {
		return false
	}
	if checks.services {
		for _, d := range t.services {
			var svc *model.Service
			if i, ok := tr.services.byName[d.name]; ok {
				svc = tr.services.all[i]
			}
			if svc != d.svc || tr.services.aliasTarget(tr.gatewayNamespace, svc) != d.target {
				return false
			}
		}
	}
	if checks.secrets {
		for _, d := range t.secrets {
			if store.Secret(d.name) != d.secret {
				return false
			}
		}
	}
	return true
}

// gatewayListenPort maps a gateway Service port to the port its pods
// listen on: the numeric targetPort, else the service port itself.
func gatewayListenPort(svc *model.Service, port uint32) uint32 {
	p := svc.PortByNumber(port)
	if p == nil {
		return 0
	}
	if p.TargetPort != 0 {
		return p.TargetPort
	}
	return p.Port
}

func (idx *ingressIndex) summary() IngressSummary {
	s := IngressSummary{Owned: idx.owned, Ignored: idx.ignored, WithProblems: len(idx.problems), Secrets: len(idx.secrets)}
	if g := idx.gateway; g != nil {
		s.HTTPPort, s.HTTPSPort = g.HTTPPort, g.HTTPSPort
		s.VirtualHosts, s.TLSHosts = len(g.HTTP), len(g.TLS)
		for _, vh := range g.HTTP {
			s.Routes += len(vh.Routes)
		}
	}
	return s
}
