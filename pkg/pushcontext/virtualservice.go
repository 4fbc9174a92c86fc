package pushcontext

import (
	"iter"
	"strings"

	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// meshGateway is the gateway name that binds a VirtualService to sidecars
// and proxyless clients.
const meshGateway = "mesh"

// VirtualService is a VirtualService that applies to the mesh (sidecars and
// proxyless gRPC clients), with its hosts resolved to fully qualified names.
type VirtualService struct {
	Spec      *networking.VirtualService // shared; never mutate
	Namespace string
	Name      string
	// Hosts are Spec.Hosts resolved in the VirtualService's namespace.
	Hosts []string
	// UsesSourceLabels is set when some HTTP match depends on who sends the
	// request (sourceLabels or sourceNamespace), so the routes differ from
	// proxy to proxy.
	UsesSourceLabels bool

	exportTo     exportSet
	domainSuffix string
}

// Key is the VirtualService's config key, to report problems against.
func (vs *VirtualService) Key() model.ConfigKey {
	return model.ConfigKey{Kind: model.KindVirtualService, Namespace: vs.Namespace, Name: vs.Name}
}

// ResolveHost resolves a destination host the way Istio does: a short name
// is a service in the VirtualService's own namespace.
func (vs *VirtualService) ResolveHost(host string) string {
	return resolveHost(host, vs.Namespace, vs.domainSuffix)
}

// DestinationHosts yields the hosts, resolved, that the HTTP routes send
// requests to or mirror them to: what the routes read of other services
// (their ports, their rules' consistent hashes). A host may come more than
// once.
func (vs *VirtualService) DestinationHosts() iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, r := range vs.Spec.GetHttp() {
			for _, d := range r.GetRoute() {
				if !yield(vs.ResolveHost(d.GetDestination().GetHost())) {
					return
				}
			}
			// Mirrors name clusters as destinations do.
			if m := r.GetMirror(); m != nil && !yield(vs.ResolveHost(m.GetHost())) {
				return
			}
			for _, m := range r.GetMirrors() {
				if !yield(vs.ResolveHost(m.GetDestination().GetHost())) {
					return
				}
			}
		}
	}
}

// matchesHost reports whether one of the VirtualService's hosts names the
// service host, exactly or through a wildcard.
func (vs *VirtualService) matchesHost(host string) (exact, wildcard bool) {
	for _, h := range vs.Hosts {
		switch {
		case h == host:
			exact = true
		case h == "*" || (isWildcard(h) && strings.HasSuffix(host, h[1:])):
			wildcard = true
		}
	}
	return exact, wildcard
}

// virtualServiceIndex holds the mesh's VirtualServices in the order Istio
// consults them for a proxy: its own namespace's private ones, then those
// exported to its namespace by name, then the public ones; each list oldest
// first. For a service host the first VirtualService in that order that
// names it wins; a later one that names it too is shadowed for that host.
type virtualServiceIndex struct {
	private    map[string][]*VirtualService
	exportedTo map[string][]*VirtualService
	public     []*VirtualService
	all        []*VirtualService
	problems   []Problem
}

func buildVirtualServiceIndex(configs []*model.Config, domainSuffix string) *virtualServiceIndex {
	idx := &virtualServiceIndex{private: map[string][]*VirtualService{}, exportedTo: map[string][]*VirtualService{}}
	for _, cfg := range configs {
		spec, ok := cfg.Spec.(*networking.VirtualService)
		if !ok || spec == nil {
			idx.problems = append(idx.problems, virtualServiceProblem(cfg, "spec is not a VirtualService; ignored"))
			continue
		}
		if !appliesToMesh(spec.Gateways) {
			continue // bound to gateways only; meshpilot serves no Gateway
		}
		vs := &VirtualService{
			Spec: spec, Namespace: cfg.Namespace, Name: cfg.Name,
			exportTo: newExportSet(spec.ExportTo, cfg.Namespace), domainSuffix: domainSuffix,
		}
		for _, h := range spec.Hosts {
			vs.Hosts = append(vs.Hosts, resolveHost(h, cfg.Namespace, domainSuffix))
		}
		vs.UsesSourceLabels = usesSourceLabels(spec)
		if len(spec.Tcp) > 0 || len(spec.Tls) > 0 {
			idx.problems = append(idx.problems, virtualServiceProblem(cfg, "tcp and tls routes are not served yet; only the http routes apply"))
		}
		idx.all = append(idx.all, vs)
		switch {
		case vs.exportTo.allows(model.ExportToAll):
			idx.public = append(idx.public, vs)
		default:
			for _, ns := range vs.exportTo {
				if ns == cfg.Namespace {
					idx.private[ns] = append(idx.private[ns], vs)
				} else {
					idx.exportedTo[ns] = append(idx.exportedTo[ns], vs)
				}
			}
		}
	}
	return idx
}

// appliesToMesh reports whether a VirtualService with these gateways binds
// to sidecars: no gateways at all, or the reserved name "mesh".
func appliesToMesh(gateways []string) bool {
	if len(gateways) == 0 {
		return true
	}
	for _, g := range gateways {
		if g == meshGateway {
			return true
		}
	}
	return false
}

func usesSourceLabels(spec *networking.VirtualService) bool {
	for _, r := range spec.Http {
		for _, m := range r.Match {
			if len(m.SourceLabels) > 0 || m.SourceNamespace != "" {
				return true
			}
		}
	}
	return false
}

// forHost returns the VirtualService that a proxy in namespace ns uses for
// a service host, or nil. Within the winning list an exact host beats a
// wildcard one, as a more specific virtual host domain does in Envoy.
func (idx *virtualServiceIndex) forHost(ns, host string) *VirtualService {
	if idx == nil || len(idx.all) == 0 {
		return nil
	}
	for _, list := range [][]*VirtualService{idx.private[ns], idx.exportedTo[ns], idx.public} {
		var wildcard *VirtualService
		for _, vs := range list {
			exact, wc := vs.matchesHost(host)
			if exact {
				return vs
			}
			if wc && wildcard == nil {
				wildcard = vs
			}
		}
		if wildcard != nil {
			return wildcard
		}
	}
	return nil
}

// usesSourceLabelsIn reports whether a VirtualService that a proxy in ns
// may use matches on the source's labels.
func (idx *virtualServiceIndex) usesSourceLabelsIn(ns string) bool {
	if idx == nil {
		return false
	}
	for _, list := range [][]*VirtualService{idx.private[ns], idx.exportedTo[ns], idx.public} {
		for _, vs := range list {
			if vs.UsesSourceLabels {
				return true
			}
		}
	}
	return false
}

// VirtualServiceFor returns the VirtualService that routes requests from a
// proxy in proxyNamespace to the service host, or nil when the default
// route applies.
func (pc *PushContext) VirtualServiceFor(proxyNamespace, host string) *VirtualService {
	return pc.virtualServices.forHost(proxyNamespace, host)
}

// RoutesDependOnSourceLabels reports whether the routes a proxy in ns gets
// depend on the proxy's labels, so that proxies may share them only when
// their labels are equal.
func (pc *PushContext) RoutesDependOnSourceLabels(ns string) bool {
	return pc.virtualServices.usesSourceLabelsIn(ns)
}

// VirtualServices returns every VirtualService bound to the mesh, oldest
// first. The slice is shared.
func (pc *PushContext) VirtualServices() []*VirtualService { return pc.virtualServices.all }

// SourceMatches reports whether a match's source conditions (sourceLabels,
// sourceNamespace) hold for a proxy. A match without them holds for all.
func SourceMatches(m *networking.HTTPMatchRequest, proxy *model.Proxy) bool {
	if ns := m.GetSourceNamespace(); ns != "" && ns != proxy.Namespace {
		return false
	}
	for k, v := range m.GetSourceLabels() {
		if got, ok := proxy.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func virtualServiceProblem(cfg *model.Config, msg string) Problem {
	return Problem{Kind: model.KindVirtualService.String(), Namespace: cfg.Namespace, Name: cfg.Name, Message: msg}
}

// VirtualServiceSummary is one VirtualService in /debug/pushcontext.
type VirtualServiceSummary struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Hosts     []string `json:"hosts"`
	ExportTo  []string `json:"exportTo"`
	Routes    int      `json:"httpRoutes"`
}

func (idx *virtualServiceIndex) summary() []VirtualServiceSummary {
	out := make([]VirtualServiceSummary, 0, len(idx.all))
	for _, vs := range idx.all {
		out = append(out, VirtualServiceSummary{
			Namespace: vs.Namespace, Name: vs.Name, Hosts: vs.Hosts,
			ExportTo: []string(vs.exportTo), Routes: len(vs.Spec.Http),
		})
	}
	return out
}

// String names the VirtualService for log lines and problems.
func (vs *VirtualService) String() string { return vs.Namespace + "/" + vs.Name }
