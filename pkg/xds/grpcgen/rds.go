package grpcgen

import (
	"fmt"
	"slices"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
	"github.com/meshpilot/meshpilot/pkg/xds/httproute"
)

// RouteGenerator serves RDS: one route configuration per dial target
// ("host:port"), with the routes of the VirtualService the client's
// namespace uses for the service, else one route to the service port's
// default cluster.
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
			served := servedAs(push, proxy.Namespace, svc)
			for _, p := range served.Ports {
				name := hostPort(svc.Hostname, p.Port)
				res, err := g.routeConfig(proxy, push, name, served, p)
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
	routes := g.virtualServiceRoutes(proxy, push, svc, port)
	if routes == nil {
		action := &route.RouteAction{
			ClusterSpecifier: &route.RouteAction_Cluster{Cluster: clusterKey{host: svc.Hostname, port: port.Port}.name()},
			HashPolicy:       g.hashPolicy(proxy, push, name, svc.Hostname, port.Port, ""),
		}
		routes = []*route.Route{{
			Match:  &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
			Action: &route.Route_Route{Route: action},
		}}
	}
	return marshalResource(name, &route.RouteConfiguration{
		Name: name,
		VirtualHosts: []*route.VirtualHost{{
			Name:    name,
			Domains: domains,
			Routes:  routes,
		}},
	})
}

// virtualServiceRoutes are the routes of the VirtualService the proxy's
// namespace uses for the service, nil when there is none or none of its
// routes applies to the port.
func (g *RouteGenerator) virtualServiceRoutes(proxy *model.Proxy, push *pushcontext.PushContext, svc *model.Service, port *model.Port) []*route.Route {
	vs := push.VirtualServiceFor(proxy.Namespace, svc.Hostname)
	if vs == nil {
		return nil
	}
	return httproute.Routes(httproute.Input{
		Flavor: httproute.GRPC, Proxy: proxy, Push: push, VS: vs, Host: svc.Hostname, Port: port.Port,
		HashPolicy: func(host string, p uint32, subset string) []*route.RouteAction_HashPolicy {
			return g.hashPolicy(proxy, push, host, host, p, subset)
		},
		Report: func(reason string) {
			if push.ReportProblem(vs.Key(), "proxyless gRPC: "+reason) {
				g.opts.Logger.Warn("VirtualService partly not translated for proxyless gRPC",
					"virtualService", vs.String(), "reason", reason)
			}
		},
	})
}

// hashPolicy is the request hash of the destination's consistent-hash load
// balancer, from the DestinationRule the proxy resolves for it (the one
// its clusters follow), resolved for the port and subset as the subset's
// cluster is.
func (g *RouteGenerator) hashPolicy(proxy *model.Proxy, push *pushcontext.PushContext, resource, host string, port uint32, subset string) []*route.RouteAction_HashPolicy {
	dr := push.DestinationRuleForProxy(proxy, host)
	if dr == nil {
		return nil
	}
	return hashPolicy(dr.TrafficPolicy(port, subset), dropReporter{push: push, logger: g.opts.Logger, rule: dr, resource: resource})
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
