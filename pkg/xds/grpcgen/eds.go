package grpcgen

import (
	"fmt"
	"slices"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
	"github.com/meshpilot/meshpilot/pkg/xds/loadassign"
)

// EndpointGenerator serves EDS: one ClusterLoadAssignment per cluster,
// taken from the shared load assignment cache.
type EndpointGenerator struct {
	assignments *loadassign.Cache
}

// NewEndpointGenerator returns the EDS generator.
func NewEndpointGenerator(opts Options) *EndpointGenerator {
	return &EndpointGenerator{assignments: opts.withDefaults().LoadAssignments}
}

// Generate implements Generator. On an endpoint-only push (req not Full) it
// returns only the load assignments of the services whose endpoints changed;
// the caller treats that as a partial update.
func (g *EndpointGenerator) Generate(proxy *model.Proxy, push *pushcontext.PushContext, w *model.WatchedResource, req *model.PushRequest) (model.Resources, error) {
	if push == nil {
		return nil, fmt.Errorf("grpcgen: no push context")
	}
	ns := proxy.Namespace
	if req != nil && !req.Full {
		// Walk only the changed services' clusters and keep the watched ones,
		// so an endpoint push costs what changed, not what the proxy watches.
		var out model.Resources
		for _, svc := range changedServices(push, ns, req) {
			var err error
			if out, err = g.emitClusters(out, push, proxy, svc, w); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	if w.Wildcard {
		var out model.Resources
		for _, svc := range push.ServicesVisibleTo(ns) {
			var err error
			if out, err = g.emitClusters(out, push, proxy, svc, w); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	out := make(model.Resources, 0, len(w.ResourceNames))
	for _, name := range w.ResourceNames {
		key, ok := parseClusterName(name)
		if !ok {
			continue
		}
		svc := visibleService(push, ns, key.host)
		if svc == nil || svc.IsExternalName() || svc.PortByNumber(key.port) == nil {
			continue
		}
		var labels map[string]string
		if key.subset != "" {
			dr := push.DestinationRuleForProxy(proxy, key.host)
			if dr == nil {
				continue
			}
			subset := dr.Subset(key.subset)
			if subset == nil {
				continue
			}
			labels = subset.GetLabels()
		}
		var err error
		if out, err = g.emit(out, push, key, labels); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// emitClusters appends the load assignments of every cluster of svc (each
// port, plain and per subset of the rule the proxy resolves, as CDS does)
// that w watches; a DNS service's clusters have none.
func (g *EndpointGenerator) emitClusters(out model.Resources, push *pushcontext.PushContext, proxy *model.Proxy, svc *model.Service, w *model.WatchedResource) (model.Resources, error) {
	if svc.IsExternalName() {
		return out, nil
	}
	dr := push.DestinationRuleForProxy(proxy, svc.Hostname)
	var err error
	for _, p := range svc.Ports {
		key := clusterKey{host: svc.Hostname, port: p.Port}
		if watches(w, key) {
			if out, err = g.emit(out, push, key, nil); err != nil {
				return nil, err
			}
		}
		if dr == nil {
			continue
		}
		for _, s := range dr.Spec.GetSubsets() {
			key.subset = s.GetName()
			if !watches(w, key) {
				continue
			}
			if out, err = g.emit(out, push, key, s.GetLabels()); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func watches(w *model.WatchedResource, key clusterKey) bool {
	if w.Wildcard {
		return true
	}
	_, found := slices.BinarySearch(w.ResourceNames, key.name())
	return found
}

// changedServices returns the services visible from ns whose endpoints the
// request reports as changed.
func changedServices(push *pushcontext.PushContext, ns string, req *model.PushRequest) []*model.Service {
	var out []*model.Service
	for key := range req.ConfigsUpdated {
		if key.Kind != model.KindEndpoints {
			continue
		}
		if svc := push.ServiceByName(key.Namespace, key.Name); svc != nil && visibleService(push, ns, svc.Hostname) != nil {
			out = append(out, svc)
		}
	}
	return out
}

// emit appends the cluster's load assignment.
func (g *EndpointGenerator) emit(out model.Resources, push *pushcontext.PushContext, key clusterKey, labels map[string]string) (model.Resources, error) {
	res, err := g.assignments.Get(push, loadassign.Cluster{Host: key.host, Port: key.port, Subset: key.subset}, labels)
	if err != nil {
		return out, err
	}
	return append(out, res), nil
}
