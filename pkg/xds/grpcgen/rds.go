package grpcgen

import (
	"fmt"
	"slices"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// RouteGenerator serves RDS: one route configuration per dial target
// ("host:port"), routing everything to the service port's default cluster.
type RouteGenerator struct {
	opts Options
}

// NewRouteGenerator returns the RDS generator.
func NewRouteGenerator(opts Options) *RouteGenerator {
	return &RouteGenerator{opts: opts.withDefaults()}
}

// Generate implements Generator. Names that do not resolve to a visible
// service port are left out.
func (g *RouteGenerator) Generate(proxy *model.Proxy, push *pushcontext.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	if push == nil {
		return nil, fmt.Errorf("grpcgen: no push context")
	}
	var out model.Resources
	var emitted nameSet
	if w.Wildcard {
		emitted = nameSet{}
		for _, svc := range push.ServicesVisibleTo(proxy.Namespace) {
			for _, p := range svc.Ports {
				name := hostPort(svc.Hostname, p.Port)
				res, err := g.routeConfig(proxy, push, name, svc, p)
				if err != nil {
					return nil, err
				}
				out = append(out, res)
				emitted.add(name)
			}
		}
	}
	for _, name := range w.ResourceNames {
		if emitted.has(name) {
			continue
		}
		svc, p := resolveTarget(push, g.opts.DomainSuffix, proxy.Namespace, name)
		if svc == nil {
			continue
		}
		res, err := g.routeConfig(proxy, push, name, svc, p)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
		emitted.add(name)
	}
	return out, nil
}

func (g *RouteGenerator) routeConfig(proxy *model.Proxy, push *pushcontext.PushContext, name string, svc *model.Service, port *model.Port) (model.Resource, error) {
	domains := authorities(svc, port.Port, proxy.Namespace)
	if !slices.Contains(domains, name) {
		// gRPC matches the virtual host against the target's authority, which
		// for a resolved short form may not be one of the canonical spellings.
		domains = append([]string{name}, domains...)
	}
	action := &route.RouteAction{
		ClusterSpecifier: &route.RouteAction_Cluster{Cluster: clusterKey{host: svc.Hostname, port: port.Port}.name()},
	}
	if dr := push.DestinationRuleFor(proxy.Namespace, svc.Hostname); dr != nil {
		action.HashPolicy = hashPolicy(dr.TrafficPolicy(port.Port, ""), dropReporter{push: push, logger: g.opts.Logger, rule: dr, resource: name})
	}
	return marshalResource(name, &route.RouteConfiguration{
		Name: name,
		VirtualHosts: []*route.VirtualHost{{
			Name:    name,
			Domains: domains,
			Routes: []*route.Route{{
				Match:  &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
				Action: &route.Route_Route{Route: action},
			}},
		}},
	})
}

// hashPolicy gives a ring-hash cluster the request hash gRPC can compute: a
// header, or the channel ID, gRPC's nearest equivalent of a source address
// (one client process usually holds one channel per target). Other hash
// keys are reported; without a hash policy grpc-go hashes each request
// randomly.
func hashPolicy(policy *networking.TrafficPolicy, drop dropReporter) []*route.RouteAction_HashPolicy {
	const unhashed = "grpc-go cannot hash requests by it; each request gets a random hash"
	switch key := policy.GetLoadBalancer().GetConsistentHash().GetHashKey().(type) {
	case nil:
		return nil
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		return []*route.RouteAction_HashPolicy{{PolicySpecifier: &route.RouteAction_HashPolicy_Header_{
			Header: &route.RouteAction_HashPolicy_Header{HeaderName: key.HttpHeaderName},
		}}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp:
		if !key.UseSourceIp {
			return nil
		}
		return []*route.RouteAction_HashPolicy{{PolicySpecifier: &route.RouteAction_HashPolicy_FilterState_{
			FilterState: &route.RouteAction_HashPolicy_FilterState{Key: "io.grpc.channel_id"},
		}}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		drop.field("loadBalancer.consistentHash.httpCookie", unhashed)
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		drop.field("loadBalancer.consistentHash.httpQueryParameterName", unhashed)
	default:
		drop.field("loadBalancer.consistentHash", fmt.Sprintf("hash key %T: %s", key, unhashed))
	}
	return nil
}
