package grpcgen

import (
	"fmt"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// ClusterGenerator serves CDS: EDS clusters named outbound|port|subset|host
// (LOGICAL_DNS for an ExternalName Service), with what grpc-go honours of
// the DestinationRule the proxy resolves (its namespace's, or one whose
// workloadSelector picks it, as for Envoy). A cluster depends only on the
// push context, the proxy namespace, its name, that rule and the identities
// behind its service, so marshalled clusters are shared by the proxies of a
// namespace that resolve the same rule, for one push context version.
type ClusterGenerator struct {
	opts  Options
	cache versionCache
}

// cdsCacheKey is what a generated cluster depends on within one push version.
type cdsCacheKey struct {
	namespace string
	cluster   clusterKey
	// identities are what ISTIO_MUTUAL verifies the server against. The
	// endpoint fast path changes them without a new push context version.
	identities pushcontext.WorkloadIdentities
	// rule is the DestinationRule the proxy resolves for the host. Within
	// one push context version a rule is one pointer; proxies of a
	// namespace that a workloadSelector tells apart resolve different ones.
	rule *pushcontext.DestinationRule
}

// NewClusterGenerator returns the CDS generator.
func NewClusterGenerator(opts Options) *ClusterGenerator {
	return &ClusterGenerator{opts: opts.withDefaults()}
}

// Generate implements Generator. Requested clusters of unknown or invisible
// services, ports or subsets are left out. With a wildcard subscription every
// cluster visible to the proxy is returned; every valid explicit name is one
// of those, so explicit names add nothing then.
func (g *ClusterGenerator) Generate(proxy *model.Proxy, push *pushcontext.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	if push == nil {
		return nil, fmt.Errorf("grpcgen: no push context")
	}
	b := clusterBuild{g: g, gen: g.cache.generation(push.Version()), push: push, proxy: proxy}
	if w.Wildcard {
		for _, svc := range push.ServicesVisibleTo(proxy.Namespace) {
			if servedAs(push, proxy.Namespace, svc) != svc {
				continue // an alias: its clients use its target's clusters
			}
			dr := push.DestinationRuleForProxy(proxy, svc.Hostname)
			for _, p := range svc.Ports {
				if err := b.emit(svc, clusterKey{host: svc.Hostname, port: p.Port}, dr); err != nil {
					return nil, err
				}
				if dr == nil {
					continue
				}
				for _, s := range dr.Spec.GetSubsets() {
					if err := b.emit(svc, clusterKey{host: svc.Hostname, port: p.Port, subset: s.GetName()}, dr); err != nil {
						return nil, err
					}
				}
			}
		}
		return b.out, nil
	}
	b.out = make(model.Resources, 0, len(w.ResourceNames))
	for _, name := range w.ResourceNames {
		key, ok := parseClusterName(name)
		if !ok {
			continue
		}
		svc := visibleService(push, proxy.Namespace, key.host)
		if svc == nil || svc.PortByNumber(key.port) == nil || servedAs(push, proxy.Namespace, svc) != svc {
			continue
		}
		dr := push.DestinationRuleForProxy(proxy, key.host)
		if key.subset != "" && (dr == nil || dr.Subset(key.subset) == nil) {
			continue
		}
		if err := b.emit(svc, key, dr); err != nil {
			return nil, err
		}
	}
	return b.out, nil
}

// clusterBuild is one Generate call's state.
type clusterBuild struct {
	g     *ClusterGenerator
	gen   *cacheGeneration
	push  *pushcontext.PushContext
	proxy *model.Proxy
	out   model.Resources
}

func (b *clusterBuild) emit(svc *model.Service, key clusterKey, dr *pushcontext.DestinationRule) error {
	ck := cdsCacheKey{namespace: b.proxy.Namespace, cluster: key, rule: dr}
	if dr != nil {
		// Without a rule there is no TLS, so no identity to check.
		ck.identities = b.push.ServiceIdentities(key.host)
	}
	if cached, ok := b.gen.entries.Load(ck); ok {
		b.out = append(b.out, *cached.(*model.Resource))
		return nil
	}
	c, err := b.buildCluster(svc, key, dr, ck.identities)
	if err != nil {
		return err
	}
	res, err := marshalResource(key.name(), c)
	if err != nil {
		return err
	}
	b.gen.entries.Store(ck, &res)
	b.out = append(b.out, res)
	return nil
}

func (b *clusterBuild) buildCluster(svc *model.Service, key clusterKey, dr *pushcontext.DestinationRule, ids pushcontext.WorkloadIdentities) (*cluster.Cluster, error) {
	name := key.name()
	c := &cluster.Cluster{Name: name}
	setDiscovery(c, svc, key.port)
	if dr == nil {
		return c, nil
	}
	drop := dropReporter{push: b.push, logger: b.g.opts.Logger, rule: dr, resource: name}
	policy := dr.TrafficPolicy(key.port, key.subset)
	applyTrafficPolicy(c, policy, drop)
	return c, applyClientTLS(c, policy.GetTls(), ids, drop)
}
