package envoygen

import (
	"fmt"
	"sort"

	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
	"github.com/meshpilot/meshpilot/pkg/xds/loadassign"
)

// EndpointGenerator serves EDS to sidecars and routers. Load assignments
// come from the shared cache (one locality group per locality, unhealthy
// endpoints marked) that the proxyless gRPC generator uses too, so a
// cluster's assignment is marshalled once for every proxy and client kind.
//
// When locality load balancing changes what a proxy should prefer (a
// localityLbSetting distribution, or failover with outlier detection), the
// assignment carries priorities or weights relative to the proxy's locality
// (and, for failoverPriority, its labels); those are cached per locality and
// label values, so proxies in the same place still share them.
type EndpointGenerator struct {
	opts      Options
	shared    *loadassign.Cache
	localized localizedCache
}

// NewEndpointGenerator returns the EDS generator.
func NewEndpointGenerator(opts Options) Generator {
	return newEndpointGenerator(opts)
}

func newEndpointGenerator(opts Options) *EndpointGenerator {
	opts = opts.withDefaults()
	return &EndpointGenerator{
		opts:   opts,
		shared: opts.LoadAssignments,
	}
}

// Generate implements Generator. Envoy requests the load assignments of its
// EDS clusters by name; a wildcard request gets those of every visible
// outbound cluster. On an endpoint-only push (req not Full) only the
// assignments of the services whose endpoints changed are returned, which
// the server sends as a partial update.
func (g *EndpointGenerator) Generate(proxy *model.Proxy, push *pushcontext.PushContext, w *model.WatchedResource, req *model.PushRequest) (model.Resources, error) {
	if push == nil {
		return nil, fmt.Errorf("envoygen: no push context")
	}
	run := edsRun{g: g, push: push, proxy: proxy, w: w, gen: g.localized.generation(push.Version())}
	switch {
	case req != nil && !req.Full:
		for key := range req.ConfigsUpdated {
			if key.Kind != model.KindEndpoints {
				continue
			}
			svc := push.ServiceByName(key.Namespace, key.Name)
			if svc != nil && visibleServiceFor(push, proxy.Namespace, svc.Hostname) != nil {
				if err := run.service(svc); err != nil {
					return nil, err
				}
			}
		}
		sortResources(run.out)
	case w.Wildcard:
		for _, svc := range push.ServicesVisibleTo(proxy.Namespace) {
			if err := run.service(svc); err != nil {
				return nil, err
			}
		}
	default:
		run.out = make(model.Resources, 0, len(w.ResourceNames))
		for _, name := range w.ResourceNames {
			if err := run.named(name); err != nil {
				return nil, err
			}
		}
	}
	return run.out, nil
}

func sortResources(res model.Resources) {
	sort.Slice(res, func(i, j int) bool { return res[i].Name < res[j].Name })
}

// edsRun is one Generate call.
type edsRun struct {
	g     *EndpointGenerator
	push  *pushcontext.PushContext
	proxy *model.Proxy
	w     *model.WatchedResource
	gen   *localizedGeneration
	out   model.Resources
}

func (r *edsRun) wants(name string) bool {
	if r.w.Wildcard {
		return true
	}
	i := sort.SearchStrings(r.w.ResourceNames, name)
	return i < len(r.w.ResourceNames) && r.w.ResourceNames[i] == name
}

// service emits the watched assignments of every cluster of svc. A DNS
// service has none: its clusters resolve its name themselves.
func (r *edsRun) service(svc *model.Service) error {
	if svc.IsExternalName() {
		return nil
	}
	rule := r.push.DestinationRuleForProxy(r.proxy, svc.Hostname)
	for _, p := range svc.Ports {
		if err := r.emit(svc, p, nil, rule, false); err != nil {
			return err
		}
		if rule == nil {
			continue
		}
		for _, s := range rule.Spec.GetSubsets() {
			if err := r.emit(svc, p, s, rule, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// named emits the assignment of one requested cluster, if it exists for the
// proxy (a visible service, a port it has, a subset its rule defines).
func (r *edsRun) named(name string) error {
	host, port, subsetName, ok := ParseOutboundClusterName(name)
	if !ok {
		return nil
	}
	svc := visibleServiceFor(r.push, r.proxy.Namespace, host)
	if svc == nil || svc.IsExternalName() {
		return nil
	}
	p := svc.PortByNumber(port)
	if p == nil {
		return nil
	}
	rule := r.push.DestinationRuleForProxy(r.proxy, host)
	var subset *networking.Subset
	if subsetName != "" {
		if subset = rule.Subset(subsetName); subset == nil {
			return nil
		}
	}
	return r.emit(svc, p, subset, rule, true)
}

// emit appends the assignment of one cluster if the proxy watches it
// (requested is set when the caller already knows it does).
func (r *edsRun) emit(svc *model.Service, p *model.Port, subset *networking.Subset, rule *pushcontext.DestinationRule, requested bool) error {
	if !requested && !r.w.Wildcard && !r.wants(OutboundClusterName(svc.Hostname, p.Port, subset.GetName())) {
		return nil
	}
	policy := rule.TrafficPolicy(p.Port, subset.GetName())
	if plan := planLocality(policy, r.proxy); plan.applies() {
		eps := r.push.Endpoints(svc.Hostname, p.Port, subset.GetLabels())
		res, err := r.gen.get(OutboundClusterName(svc.Hostname, p.Port, subset.GetName()), eps, plan)
		if err != nil {
			return err
		}
		r.out = append(r.out, res)
		return nil
	}
	res, err := r.g.shared.Get(r.push, loadassign.Cluster{Host: svc.Hostname, Port: p.Port, Subset: subset.GetName()}, subset.GetLabels())
	if err != nil {
		return err
	}
	r.out = append(r.out, res)
	return nil
}

// visibleServiceFor returns the service named host if namespace ns may see
// it, by the push context's own visibility index, so that CDS and EDS agree.
func visibleServiceFor(push *pushcontext.PushContext, ns, host string) *model.Service {
	visible := push.ServicesVisibleTo(ns)
	i := sort.Search(len(visible), func(i int) bool { return visible[i].Hostname >= host })
	if i < len(visible) && visible[i].Hostname == host {
		return visible[i]
	}
	return nil
}
