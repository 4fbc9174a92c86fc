package xds

import (
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// pushPlan is one debounced push worked out once for every connection: what
// changed, between which two push contexts, and the request each type's
// generator sees. Connections ask it which of their watched types the push
// can affect (scopeFor); a slow connection merges the plans it missed.
type pushPlan struct {
	// id names the plan in shared generation keys: partial EDS results
	// depend on the plan's endpoint request, not only on the push context.
	id  uint64
	req *model.PushRequest
	// everything is set for a forced push and for changes of a kind the
	// server cannot scope: every watched type of every connection.
	everything bool
	// prev is what connections were served before this push, cur what they
	// are served now; both are needed to tell who could see a deleted or
	// re-exported service. For an endpoint-only push they are the same.
	prev, cur *pushcontext.PushContext
	// services are the services the push changed (added, updated, deleted).
	services []changedService
	// rules are the hosts whose DestinationRules changed, and how.
	rules map[string]pushcontext.RuleChange
	// eds is the endpoint-only request that partial EDS generation sees: the
	// services whose endpoints or subsets changed. nil when there are none.
	eds *model.PushRequest
	// endpointsChanged is set when eds names services whose endpoints
	// changed (not only their subsets), which every watcher may need.
	endpointsChanged bool
	// workloadsChanged is set when Pods changed: a proxy whose own Pod
	// changed (or appeared) gets everything, as its inbound side follows it.
	workloadsChanged bool
	// ingressChanged is set when Ingresses or IngressClasses changed, and
	// secrets lists the Secrets that changed: only the ingress gateway's
	// configuration depends on them.
	ingressChanged bool
	secrets        []model.NamespacedName
	// peerAuthnChanged is set when PeerAuthentications changed: inbound
	// listeners follow them, clusters (auto mTLS) follow the namespace-wide
	// ones, and the endpoints they change are in eds.
	peerAuthnChanged bool
	// virtualServicesChanged is set when VirtualServices changed: only
	// routes follow them (a route naming a new subset makes a gRPC client
	// subscribe to its cluster through CDS on its own).
	virtualServicesChanged bool
	// addressesChanged is set when Pods, Services or Namespaces changed,
	// or endpoints WDS reads (WDSReadsEndpoints): what node proxies are
	// sent is made of them.
	addressesChanged bool

	// destinations are the hosts VirtualServices route to (routedTo),
	// worked out on first use.
	destinationsOnce sync.Once
	destinations     map[string]struct{}

	// scopes memoizes scopeFor by what a scope depends on (namespace, and
	// labels where workload-selector rules exist): many proxies share one.
	scopes sync.Map // string -> pushScope
}

type changedService struct {
	namespace, hostname string
}

// pushScope says which of a connection's watched types a push regenerates.
// EDS is regenerated from the plan's partial request unless all is set.
type pushScope struct {
	all                                             bool
	clusters, listeners, routes, endpoints, secrets bool
	// addresses regenerates WDS; its generation is the whole set, and the
	// server sends only the Addresses that differ.
	addresses bool
}

// newPushPlan works out what req can affect. prev is the push context served
// before req was applied, cur the one served after.
func newPushPlan(id uint64, req *model.PushRequest, prev, cur *pushcontext.PushContext) *pushPlan {
	p := &pushPlan{id: id, req: req, prev: prev, cur: cur}
	if !req.Full {
		// The endpoint fast path: only EDS, and only what req names.
		p.eds, p.endpointsChanged = req, true
		return p
	}
	if len(req.ConfigsUpdated) == 0 || prev == nil {
		p.everything = true
		return p
	}
	var edsKeys map[model.ConfigKey]struct{}
	addEDS := func(key model.ConfigKey) {
		if edsKeys == nil {
			edsKeys = map[model.ConfigKey]struct{}{}
		}
		edsKeys[key] = struct{}{}
	}
	rulesChanged, peerAuthnChanged := false, false
	for key := range req.ConfigsUpdated {
		switch key.Kind {
		case model.KindService:
			p.addressesChanged = true
			for _, pc := range []*pushcontext.PushContext{cur, prev} {
				if svc := pc.ServiceByName(key.Namespace, key.Name); svc != nil {
					p.services = append(p.services, changedService{namespace: svc.Namespace, hostname: svc.Hostname})
					p.services = appendAliasesReading(p.services, prev, cur, svc.Hostname)
					break
				}
			}
		case model.KindEndpoints:
			addEDS(key)
			p.endpointsChanged = true
			// Endpoints without a Pod are workloads of their own in WDS, and
			// a selector-less service's are its Pods' services there.
			name := model.NamespacedName{Namespace: key.Namespace, Name: key.Name}
			if prev.WDSReadsEndpoints(name) || cur.WDSReadsEndpoints(name) {
				p.addressesChanged = true
			}
			// Clusters verify servers against the identities behind the
			// service, and original-destination clusters send mutual TLS
			// only while every endpoint of the port takes it. The fast
			// path turns a change of either into a service change before
			// planning; an endpoint change that rode along with a config
			// change reaches the plan as it is, so it must be told apart
			// here, or CDS keeps the old identities or mode.
			if svc := cur.ServiceByName(key.Namespace, key.Name); svc != nil &&
				(prev.ServiceIdentities(svc.Hostname) != cur.ServiceIdentities(svc.Hostname) ||
					cur.MayPassThrough(svc.Hostname) && mtlsPortsChanged(prev, cur, svc)) {
				p.services = append(p.services, changedService{namespace: svc.Namespace, hostname: svc.Hostname})
				p.services = appendAliasesReading(p.services, prev, cur, svc.Hostname)
			}
		case model.KindDestinationRule:
			rulesChanged = true
		case model.KindWorkload:
			// Other proxies see Pods only through the endpoints the sources
			// re-emit for them; node proxies see them as Addresses.
			p.workloadsChanged = true
			p.addressesChanged = true
		case model.KindNamespace:
			// Only WDS depends on namespaces (their ambient label).
			p.addressesChanged = true
		case model.KindIngress, model.KindIngressClass:
			p.ingressChanged = true
		case model.KindSecret:
			p.secrets = append(p.secrets, model.NamespacedName{Namespace: key.Namespace, Name: key.Name})
		case model.KindPeerAuthentication:
			p.peerAuthnChanged, peerAuthnChanged = true, true
		case model.KindVirtualService:
			p.virtualServicesChanged = true
		case model.KindSourceProblems:
			// Only /debug/pushcontext shows them.
		default:
			p.everything = true
			return p
		}
	}
	// The build may have read Services whose changes are announced only
	// later: their push would compare two snapshots that both hold the new
	// state, and tell no proxy that saw the old one.
	for _, svc := range cur.UnannouncedServices(prev, req) {
		p.services = append(p.services, changedService{namespace: svc.Namespace, hostname: svc.Hostname})
		p.services = appendAliasesReading(p.services, prev, cur, svc.Hostname)
	}
	if rulesChanged {
		p.rules = cur.RuleChanges(prev, req)
		for host, change := range p.rules {
			if !change.SubsetsChanged && !change.LocalityChanged {
				continue
			}
			if svc := cur.ServiceForHostname(host); svc != nil {
				addEDS(model.ConfigKey{Kind: model.KindEndpoints, Namespace: svc.Namespace, Name: svc.Name})
			}
		}
	}
	if peerAuthnChanged {
		// Endpoints say whether auto mTLS may send them mutual TLS, which
		// workload policies decide: the build renewed the entries of the
		// services where that changed.
		for _, svc := range cur.Services() {
			if prev.EndpointsVersion(svc.Hostname) != cur.EndpointsVersion(svc.Hostname) {
				addEDS(model.ConfigKey{Kind: model.KindEndpoints, Namespace: svc.Namespace, Name: svc.Name})
				p.endpointsChanged = true
			}
		}
	}
	if edsKeys != nil {
		p.eds = &model.PushRequest{ConfigsUpdated: edsKeys, Start: req.Start}
	}
	return p
}

// mtlsPortsChanged reports whether, for a port of svc, whether every
// endpoint takes mutual TLS differs between two push contexts.
func mtlsPortsChanged(prev, cur *pushcontext.PushContext, svc *model.Service) bool {
	for _, p := range svc.Ports {
		if prev.AllEndpointsMTLS(svc.Hostname, p.Port) != cur.AllEndpointsMTLS(svc.Hostname, p.Port) {
			return true
		}
	}
	return false
}

// appendAliasesReading adds to changed the ExternalName Services whose
// resolution, before or after the push, read host: their clients are
// routed as the target's, by its ports and names, or fall back to a DNS
// cluster when it goes, so they must be pushed as if the alias changed.
func appendAliasesReading(changed []changedService, prev, cur *pushcontext.PushContext, host string) []changedService {
	for _, pc := range []*pushcontext.PushContext{prev, cur} {
		for _, a := range pc.AliasesReading(host) {
			changed = append(changed, changedService{namespace: a.Namespace, hostname: a.Hostname})
		}
	}
	return changed
}

// mergePlans combines a plan a connection has not taken yet (older) with a
// newer one, as if both had been one push from older.prev to newer.cur.
func mergePlans(id uint64, older, newer *pushPlan) *pushPlan {
	if older == nil {
		return newer
	}
	if newer == nil {
		return older
	}
	m := &pushPlan{
		id:               id,
		req:              older.req.Merge(newer.req),
		everything:       older.everything || newer.everything,
		prev:             older.prev,
		cur:              newer.cur,
		services:         slices.Concat(older.services, newer.services),
		eds:              older.eds.Merge(newer.eds),
		endpointsChanged: older.endpointsChanged || newer.endpointsChanged,
		workloadsChanged: older.workloadsChanged || newer.workloadsChanged,
		ingressChanged:   older.ingressChanged || newer.ingressChanged,
		secrets:          slices.Concat(older.secrets, newer.secrets),
		peerAuthnChanged: older.peerAuthnChanged || newer.peerAuthnChanged,
		addressesChanged: older.addressesChanged || newer.addressesChanged,

		virtualServicesChanged: older.virtualServicesChanged || newer.virtualServicesChanged,
	}
	if len(older.rules)+len(newer.rules) > 0 {
		m.rules = maps.Clone(older.rules)
		if m.rules == nil {
			m.rules = map[string]pushcontext.RuleChange{}
		}
		for host, c := range newer.rules {
			m.rules[host] = m.rules[host].Or(c)
		}
	}
	return m
}

// scopeFor says which types of proxy's watches this push regenerates.
func (p *pushPlan) scopeFor(proxy *model.Proxy) pushScope {
	switch {
	case p.everything:
		return pushScope{all: true}
	case !p.req.Full:
		return pushScope{endpoints: p.eds != nil, addresses: p.addressesChanged}
	case p.workloadsChanged && p.ownWorkloadChanged(proxy):
		// Not memoized: it depends on this proxy's own Pod.
		return pushScope{all: true}
	}
	key := p.scopeKey(proxy)
	if sc, ok := p.scopes.Load(key); ok {
		return sc.(pushScope)
	}
	sc := p.computeScope(proxy)
	p.scopes.Store(key, sc)
	return sc
}

// ownWorkloadChanged reports whether the proxy's own Pod changed in what
// its configuration reads of it: whether there is one, its IPs, the
// services that select it, and the mutual TLS of its inbound side, which
// PeerAuthentications with a selector set by the Pod's labels. A relabel
// that changes no selection does not.
func (p *pushPlan) ownWorkloadChanged(proxy *model.Proxy) bool {
	a, b := p.prev.WorkloadForProxy(proxy), p.cur.WorkloadForProxy(proxy)
	if a == b {
		return false
	}
	if a == nil || b == nil {
		return true
	}
	return !slices.Equal(a.IPs, b.IPs) || !slices.Equal(p.prev.ServiceTargets(a), p.cur.ServiceTargets(b)) ||
		!p.prev.InboundMTLS(a.Namespace, a.Labels).Equal(p.cur.InboundMTLS(b.Namespace, b.Labels))
}

// scopeKey is what computeScope depends on: the namespace, plus the labels
// when workload-selector rules in the namespace may apply to the proxy, and
// whether the proxy is the ingress gateway.
func (p *pushPlan) scopeKey(proxy *model.Proxy) string {
	ns := proxy.Namespace
	if p.isIngressGateway(proxy) {
		ns = "\x01gateway\x00" + ns
	}
	if len(p.rules) == 0 || !(p.prev.HasWorkloadSelectorRules(proxy.Namespace) || p.cur.HasWorkloadSelectorRules(proxy.Namespace)) {
		return ns
	}
	return ns + "\x00" + labelsKey(proxy.Labels)
}

// isIngressGateway reports whether proxy is, or was until this push, served
// the ingress gateway's configuration.
func (p *pushPlan) isIngressGateway(proxy *model.Proxy) bool {
	return proxy.Type == model.Router && (p.cur.IsIngressGateway(proxy) || p.prev.IsIngressGateway(proxy))
}

func (p *pushPlan) computeScope(proxy *model.Proxy) pushScope {
	sc := p.meshScope(proxy)
	if sc.all || !p.isIngressGateway(proxy) {
		return sc
	}
	gw := p.gatewayScope()
	if gw.all {
		return gw
	}
	sc.listeners = sc.listeners || gw.listeners
	sc.routes = sc.routes || gw.routes
	sc.secrets = sc.secrets || gw.secrets
	return sc
}

// gatewayScope is what the push changes in the ingress gateway's own
// configuration. An Ingress or IngressClass change may change any of its
// listeners, routes and the Secrets they use. A Secret change that leaves
// the TLS hosts as they were (a rotated certificate) changes only SDS; TLS
// hosts that became usable or unusable change the listeners and routes
// too. A change of a Service that an Ingress routes to (or names as
// an alias: the change of a hop of its chain counts as the alias's), or of
// the gateway Service's ports, changes everything.
func (p *pushPlan) gatewayScope() pushScope {
	before, after := p.prev.IngressGateway(), p.cur.IngressGateway()
	var sc pushScope
	if p.ingressChanged {
		sc.listeners, sc.routes, sc.secrets = true, true, true
	}
	// TLS hosts are compared whatever the plan says changed: a build reads
	// the store as it is then, which may already hold a Secret change whose
	// own event comes in a later plan, when there is nothing left to tell.
	if !sameTLSHosts(before, after) {
		sc.listeners, sc.routes, sc.secrets = true, true, true
	}
	for _, name := range p.secrets {
		if gatewayUsesSecret(before, name) || gatewayUsesSecret(after, name) {
			sc.secrets = true
		}
	}
	for _, svc := range p.services {
		if gatewayRoutesTo(before, svc.hostname) || gatewayRoutesTo(after, svc.hostname) {
			return pushScope{all: true}
		}
	}
	if len(p.services) > 0 && !sameListenPorts(before, after) {
		// The gateway Service's ports changed.
		return pushScope{all: true}
	}
	return sc
}

func sameListenPorts(a, b *pushcontext.IngressGateway) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.HTTPPort == b.HTTPPort && a.HTTPSPort == b.HTTPSPort
}

func gatewayUsesSecret(gw *pushcontext.IngressGateway, name model.NamespacedName) bool {
	if gw == nil {
		return false
	}
	for _, t := range gw.TLS {
		if t.Secret == name {
			return true
		}
	}
	return false
}

func gatewayRoutesTo(gw *pushcontext.IngressGateway, host string) bool {
	if gw == nil {
		return false
	}
	for _, vh := range gw.HTTP {
		for _, r := range vh.Routes {
			if r.Host == host || r.Via == host {
				return true
			}
		}
	}
	return false
}

// sameTLSHosts reports whether two gateways terminate TLS for the same
// hosts with the same Secrets.
func sameTLSHosts(a, b *pushcontext.IngressGateway) bool {
	var at, bt []*pushcontext.IngressTLSHost
	if a != nil {
		at = a.TLS
	}
	if b != nil {
		bt = b.TLS
	}
	return slices.EqualFunc(at, bt, func(x, y *pushcontext.IngressTLSHost) bool {
		return x.SecretName == y.SecretName && x.From == y.From && slices.Equal(x.Hosts, y.Hosts)
	})
}

// meshScope is what the push changes in the configuration every proxy of
// the namespace shares: services and destination rules.
func (p *pushPlan) meshScope(proxy *model.Proxy) pushScope {
	ns := proxy.Namespace
	var sc pushScope
	for _, svc := range p.services {
		// A proxy's own namespace always counts: its inbound configuration
		// follows the services that select it, whatever their exportTo.
		if svc.namespace == ns || visibleIn(p.prev, ns, svc.hostname) || visibleIn(p.cur, ns, svc.hostname) {
			return pushScope{all: true}
		}
		// A route to a service the proxy cannot see still names its
		// cluster, by the service's port when the destination gives none.
		sc.routes = sc.routes || p.routedTo(svc.hostname)
	}
	sc.endpoints = p.endpointsChanged
	sc.clusters, sc.listeners = p.peerAuthnChanged, p.peerAuthnChanged
	sc.addresses = p.addressesChanged
	sc.routes = sc.routes || p.virtualServicesChanged
	for host, change := range p.rules {
		visible := visibleIn(p.prev, ns, host) || visibleIn(p.cur, ns, host)
		// Consistent hashing is configured on routes (hash_policy), so a
		// change of it must reach RDS as well as CDS. A route to a host the
		// proxy cannot see still carries it: a VirtualService of a host it
		// sees may name that host as its destination.
		if !sc.routes && (visible || p.routedTo(host)) &&
			hashPolicyChanged(p.prev.DestinationRuleForProxy(proxy, host), p.cur.DestinationRuleForProxy(proxy, host)) {
			sc.routes = true
		}
		if !visible {
			continue
		}
		sc.clusters = true
		sc.listeners = sc.listeners || change.TunnelChanged
		// Subsets select endpoints; locality settings set their priorities
		// and weights.
		sc.endpoints = sc.endpoints || change.SubsetsChanged || change.LocalityChanged
	}
	// A DestinationRule credential is read from the proxy's own namespace.
	for _, name := range p.secrets {
		if name.Namespace == ns && (p.cur.CredentialSecret(ns, name.Name) != nil || p.prev.CredentialSecret(ns, name.Name) != nil) {
			sc.secrets = true
		}
	}
	return sc
}

// request returns the request that typeURL's generator sees in this push, or
// nil when the push cannot affect that type for a connection in scope sc.
func (p *pushPlan) request(sc pushScope, typeURL string) *model.PushRequest {
	if sc.all {
		return p.req
	}
	switch typeURL {
	case ClusterType:
		if sc.clusters {
			return p.req
		}
	case ListenerType:
		if sc.listeners {
			return p.req
		}
	case RouteType:
		if sc.routes {
			return p.req
		}
	case EndpointType:
		if sc.endpoints {
			return p.eds
		}
	case SecretType:
		if sc.secrets {
			return p.req
		}
	case AddressType:
		if sc.addresses {
			return p.req
		}
	}
	return nil
}

// visibleIn reports whether a proxy in namespace ns sees host in pc.
func visibleIn(pc *pushcontext.PushContext, ns, host string) bool {
	if pc == nil {
		return false
	}
	_, found := slices.BinarySearchFunc(pc.ServicesVisibleTo(ns), host, func(s *model.Service, h string) int {
		return strings.Compare(s.Hostname, h)
	})
	return found
}

// routedTo reports whether some VirtualService, before or after the push,
// names host as an HTTP route (or mirror) destination. Routes depend on such a host
// whether or not the proxy sees it. It does not ask which namespaces use
// that VirtualService: a spare push of routes costs less than working that
// out. (An alias leads routes only to a target the proxy sees, which the
// callers cover.)
func (p *pushPlan) routedTo(host string) bool {
	p.destinationsOnce.Do(func() {
		p.destinations = map[string]struct{}{}
		for _, pc := range []*pushcontext.PushContext{p.prev, p.cur} {
			if pc == nil {
				continue
			}
			for _, vs := range pc.VirtualServices() {
				for host := range vs.DestinationHosts() {
					p.destinations[host] = struct{}{}
				}
			}
		}
	})
	_, ok := p.destinations[host]
	return ok
}

// hashPolicyChanged reports whether two resolutions of a host's rule differ
// in any consistent-hash setting (top level, per port, per subset).
func hashPolicyChanged(a, b *pushcontext.DestinationRule) bool {
	var as, bs *networking.DestinationRule
	if a != nil {
		as = a.Spec
	}
	if b != nil {
		bs = b.Spec
	}
	if as == bs {
		return false
	}
	ha, hb := consistentHashes(as), consistentHashes(bs)
	if len(ha) != len(hb) {
		return true
	}
	for i := range ha {
		if ha[i].where != hb[i].where || !proto.Equal(ha[i].hash, hb[i].hash) {
			return true
		}
	}
	return false
}

type hashAt struct {
	where string
	hash  *networking.LoadBalancerSettings_ConsistentHashLB
}

// consistentHashes lists the consistent-hash settings of a rule, in a
// canonical order, each with where it applies.
func consistentHashes(dr *networking.DestinationRule) []hashAt {
	var out []hashAt
	addPolicy := func(prefix string, tp *networking.TrafficPolicy) {
		if h := tp.GetLoadBalancer().GetConsistentHash(); h != nil {
			out = append(out, hashAt{prefix, h})
		}
		for _, pl := range tp.GetPortLevelSettings() {
			if h := pl.GetLoadBalancer().GetConsistentHash(); h != nil {
				out = append(out, hashAt{prefix + "port:" + formatUint(uint64(pl.GetPort().GetNumber())), h})
			}
		}
	}
	addPolicy("", dr.GetTrafficPolicy())
	for _, s := range dr.GetSubsets() {
		addPolicy("subset:"+s.GetName()+":", s.GetTrafficPolicy())
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].where < out[j].where })
	return out
}

// labelsKey renders labels canonically.
func labelsKey(labels map[string]string) string {
	keys := slices.Sorted(maps.Keys(labels))
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(labels[k])
		b.WriteByte(0)
	}
	return b.String()
}
