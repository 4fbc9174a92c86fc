package envoygen

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
	"github.com/meshpilot/meshpilot/pkg/xds/httproute"
)

// RouteGenerator serves RDS to Envoy sidecars: for each outbound HTTP port,
// a route configuration named after the port with one virtual host per
// visible service on that port ("host:port") and the allow_any catch-all.
// As in Istio since 1.15, the configuration ignores the port of the Host
// header (ignore_port_in_host_matching) and its domains carry none: the
// listener has already chosen the port, and listing every name a second
// time with ":port" doubled the domains Envoy holds and matches.
// A route configuration depends on the proxy's namespace (and labels, when
// workload-selected DestinationRules exist there) and is built once per
// push context version for all proxies that share them. The ingress
// gateway gets the routes of the Ingresses (gateway_routes.go); other
// routers get none.
type RouteGenerator struct {
	opts     Options
	parts    *routeParts
	vhosts   *vhostEncoder
	allowAny []byte // the marshalled catch-all virtual host
	views    outboundViews
	cache    lrCache
	// gatewayEncoder and gatewayVhosts encode the ingress gateway's
	// virtual hosts and keep them across push contexts.
	gatewayEncoder *gatewayVhostEncoder
	gatewayVhosts  vhostBytes
}

// NewRouteGenerator returns the RDS generator.
func NewRouteGenerator(opts Options) Generator {
	return newRouteGenerator(opts)
}

func newRouteGenerator(opts Options) *RouteGenerator {
	parts := newRouteParts()
	allowAny, err := lrMarshal.Marshal(parts.allowAnyVirtualHost())
	if err != nil {
		panic(err) // a fixed message; marshalling cannot fail
	}
	vhosts := newVhostEncoder(parts)
	return &RouteGenerator{opts: opts.withDefaults(), parts: parts, vhosts: vhosts, allowAny: allowAny,
		gatewayEncoder: newGatewayVhostEncoder(vhosts)}
}

type routeConfigKey struct {
	scope proxyRuleScope
	name  string
}

// Generate implements Generator. Every requested name gets a configuration,
// as Istio does: an Envoy waiting for a route it was promised would hold
// its listener back indefinitely. A port without HTTP services gets only
// the catch-all, and a name that is not a port number an empty one.
func (g *RouteGenerator) Generate(proxy *model.Proxy, push *pushcontext.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	if push == nil {
		return nil, fmt.Errorf("envoygen: no push context")
	}
	if proxy.Type != model.SidecarProxy {
		if gw := gatewayFor(proxy, push); gw != nil {
			return g.generateGateway(push, gw, w)
		}
		return model.Resources{}, nil
	}
	gen := g.cache.generation(push.Version())
	scope := ruleScopeOf(proxy, push)
	names := w.ResourceNames
	if w.Wildcard {
		names = g.wildcardNames(push, proxy.Namespace, w.ResourceNames)
	}
	out := make(model.Resources, 0, len(names))
	for _, name := range names {
		v, err := gen.get(routeConfigKey{scope: scope, name: name}, func() (any, error) {
			return g.build(gen, push, proxy, name)
		})
		if err != nil {
			return nil, err
		}
		out = append(out, v.(model.Resource))
	}
	return out, nil
}

// wildcardNames is every HTTP port's route name plus the explicit names,
// sorted and without repeats.
func (g *RouteGenerator) wildcardNames(push *pushcontext.PushContext, namespace string, explicit []string) []string {
	view := g.views.get(push, namespace)
	set := make(map[string]struct{}, len(view.httpPorts)+len(explicit))
	for _, p := range view.httpPorts {
		set[OutboundRouteName(p)] = struct{}{}
	}
	for _, n := range explicit {
		set[n] = struct{}{}
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// routePort parses a route name that is a port number in canonical form.
func routePort(name string) (uint32, bool) {
	p, err := strconv.ParseUint(name, 10, 16)
	if err != nil || p == 0 || OutboundRouteName(uint32(p)) != name {
		return 0, false
	}
	return uint32(p), true
}

func (g *RouteGenerator) build(gen *lrGeneration, push *pushcontext.PushContext, proxy *model.Proxy, name string) (model.Resource, error) {
	out, err := routeConfigurationHead(name)
	if err != nil {
		return model.Resource{}, err
	}
	if port, ok := routePort(name); ok {
		b := routeBuild{g: g, gen: gen, push: push, proxy: proxy, problems: lrProblems{logger: g.opts.Logger, push: push}}
		if out, err = b.appendVirtualHosts(out, g.views.get(push, proxy.Namespace).httpServices[port], port, name); err != nil {
			return model.Resource{}, err
		}
		out = appendVirtualHost(out, g.allowAny)
	}
	return model.Resource{Name: name, Resource: &anypb.Any{TypeUrl: RouteType, Value: out}}, nil
}

// routeConfigurationHead marshals the fields of a sidecar's or the
// gateway's route configuration that precede its virtual hosts. Virtual
// hosts list hosts without ports, and the port of the Host header takes no
// part in choosing one (ignore_port_in_host_matching), as in Istio.
func routeConfigurationHead(name string) ([]byte, error) {
	return lrMarshal.Marshal(&route.RouteConfiguration{Name: name, ValidateClusters: wrapperspb.Bool(false), IgnorePortInHostMatching: true})
}

// lrMarshal is how listeners and routes are marshalled: deterministically,
// so equal resources have equal bytes and versions.
var lrMarshal = proto.MarshalOptions{Deterministic: true}

// virtualHostsField is RouteConfiguration.virtual_hosts. A route
// configuration is assembled from separately marshalled virtual hosts: the
// wire format of a repeated message field is the concatenation of its
// elements, so a virtual host that many namespaces see alike is marshalled
// once per push.
var virtualHostsField = (&route.RouteConfiguration{}).ProtoReflect().Descriptor().Fields().ByName("virtual_hosts").Number()

func appendVirtualHost(b, vhost []byte) []byte {
	b = protowire.AppendTag(b, virtualHostsField, protowire.BytesType)
	return protowire.AppendBytes(b, vhost)
}

// routeBuild is the state of building one route configuration.
type routeBuild struct {
	g        *RouteGenerator
	gen      *lrGeneration
	push     *pushcontext.PushContext
	proxy    *model.Proxy
	problems lrProblems
}

// vhostKey is everything a service's virtual host depends on: the service
// port, where the proxy stands relative to the service's namespace (which
// decides the short names; every other namespace sees the same ones), and
// the rule the proxy resolves for the host (which decides the hash policy).
type vhostKey struct {
	svc    *model.Service
	port   uint32
	viewer namespaceRelation
	rule   *pushcontext.DestinationRule
	// vs is the VirtualService whose routes the virtual host carries.
	vs *pushcontext.VirtualService
	// dests is what those routes read of their destinations for the
	// proxy (destinationsKey); empty without vs.
	dests string
}

// destinationsKey identifies what a VirtualService's routes read, for one
// proxy, of the hosts they route and mirror to: the alias target each
// resolves to from the proxy's namespace, and the DestinationRule the proxy
// resolves for it (its consistent hash goes on the route). Neither follows
// from the virtual host's own service and rule, and both may differ between
// proxies whose virtual hosts are otherwise shared. Pointers identify them
// within the push context that the cache generation belongs to.
func destinationsKey(push *pushcontext.PushContext, proxy *model.Proxy, vs *pushcontext.VirtualService) string {
	if vs == nil {
		return ""
	}
	var b strings.Builder
	seen := map[string]bool{}
	for host := range vs.DestinationHosts() {
		if seen[host] {
			continue
		}
		seen[host] = true
		target := push.AliasTarget(proxy.Namespace, push.ServiceForHostname(host))
		if target != nil {
			host = target.Hostname
		}
		fmt.Fprintf(&b, "%p/%p;", target, push.DestinationRuleForProxy(proxy, host))
	}
	return b.String()
}

// namespaceRelation is how a proxy's namespace relates to a service's, as
// far as the names it may use for the service go.
type namespaceRelation uint8

const (
	unknownNamespace namespaceRelation = iota // no short names
	otherNamespace
	sameNamespace
)

func relation(proxyNamespace, serviceNamespace string) namespaceRelation {
	switch proxyNamespace {
	case "":
		return unknownNamespace
	case serviceNamespace:
		return sameNamespace
	}
	return otherNamespace
}

// vhostSizeGuess is about what one service's virtual host takes marshalled
// (Istio's default retry policy is 210 bytes of it), with some room: the
// whole buffer is cleared when it is allocated, and kept as long as the
// route configuration, so a guess far over the mark costs as much as one
// regrowth. Kubernetes names of usual length come to 450–550 bytes (from
// 400 for one-letter names to 625 for a 40-character name.namespace).
const vhostSizeGuess = 520

// appendVirtualHosts appends the virtual hosts of services (sorted by
// hostname, so by virtual host name) to a marshalled route configuration.
// Envoy rejects a route configuration in which two virtual hosts share a
// domain, so a domain already taken is dropped from the later virtual
// host, with a reason.
func (b *routeBuild) appendVirtualHosts(out []byte, services []*model.Service, port uint32, routeName string) ([]byte, error) {
	out = slices.Grow(out, vhostSizeGuess*(len(services)+1))
	// The names of Kubernetes services cannot collide (hostnames are unique
	// and short names follow from them); their cluster IPs can, in a YAML
	// source. Only when some hostname is not a Kubernetes one must every
	// domain be checked.
	checkAll := slices.ContainsFunc(services, func(s *model.Service) bool { return !hasKubernetesHostname(s) })
	owners := make(map[string]*model.Service, len(services))
	var (
		hosts    []string
		newKeys  []vhostKey
		newBytes [][]byte
		portStr  = strconv.FormatUint(uint64(port), 10)
	)
	for _, svc := range services {
		aliases := b.push.AliasesOf(b.proxy.Namespace, svc)
		hosts = vhostHosts(hosts[:0], svc, aliases, b.proxy.Namespace)
		names := len(hosts) - len(svc.ClusterIPs)
		kept := hosts[:0]
		for i, h := range hosts {
			if i < names && !checkAll {
				kept = append(kept, h)
				continue
			}
			if owner, taken := owners[h]; taken {
				b.problems.report(serviceKey(svc), fmt.Sprintf(
					"domain %q dropped from virtual host %s in route %s: virtual host %s already has it",
					h, hostPort(svc.Hostname, port), routeName, hostPort(owner.Hostname, port)))
				continue
			}
			owners[h] = svc
			kept = append(kept, h)
		}
		if len(kept) == 0 {
			continue
		}
		dr := b.push.DestinationRuleForProxy(b.proxy, svc.Hostname)
		vs := b.push.VirtualServiceFor(b.proxy.Namespace, svc.Hostname)
		// A virtual host that lost domains is particular to this route
		// configuration and is not shared, nor is one whose routes depend
		// on the proxy's labels, nor one with aliases: which of them the
		// namespace sees, and their short names there, are not in the key
		// (aliases are few).
		shared := len(kept) == len(hosts) && (vs == nil || !vs.UsesSourceLabels) && len(aliases) == 0
		key := vhostKey{svc: svc, port: port, viewer: relation(b.proxy.Namespace, svc.Namespace), rule: dr, vs: vs}
		if shared {
			key.dests = destinationsKey(b.push, b.proxy, vs)
			if vb, ok := b.gen.vhosts.get(key); ok {
				out = appendVirtualHost(out, vb)
				continue
			}
		}
		if vs != nil {
			vb, err := b.virtualServiceHost(vs, svc, port, kept)
			if err != nil {
				return nil, err
			}
			if vb != nil {
				out = appendVirtualHost(out, vb)
				if shared {
					newKeys = append(newKeys, key)
					newBytes = append(newBytes, vb)
				}
				continue
			}
		}
		hash, err := hashPolicyField(b.hashPolicy(svc, port, dr))
		if err != nil {
			return nil, err
		}
		// Encode straight into the route configuration; the cache keeps
		// the subslice (capped, so nobody can append into it).
		size := b.g.vhosts.size(svc.Hostname, portStr, kept, hash)
		out = appendFieldHeader(out, virtualHostsField, size)
		start := len(out)
		out = b.g.vhosts.append(out, svc.Hostname, portStr, kept, hash)
		if len(out)-start != size {
			return nil, fmt.Errorf("envoygen: virtual host %s encoded in %d bytes, sized %d", hostPort(svc.Hostname, port), len(out)-start, size)
		}
		if shared {
			newKeys = append(newKeys, key)
			newBytes = append(newBytes, out[start:len(out):len(out)])
		}
	}
	b.gen.vhosts.addAll(newKeys, newBytes)
	return out, nil
}

// virtualServiceHost marshals the virtual host of a service port that a
// VirtualService routes; nil when none of its routes applies to the port,
// and the default virtual host serves it. Such hosts are few, so they are
// built as messages rather than encoded by hand.
func (b *routeBuild) virtualServiceHost(vs *pushcontext.VirtualService, svc *model.Service, port uint32, hosts []string) ([]byte, error) {
	routes := httproute.Routes(httproute.Input{
		Flavor: httproute.Envoy, Proxy: b.proxy, Push: b.push, VS: vs, Host: svc.Hostname, Port: port,
		DefaultRetry: b.g.parts.defaultRetry,
		HashPolicy: func(host string, p uint32, subset string) []*route.RouteAction_HashPolicy {
			return HashPolicy(b.push.DestinationRuleForProxy(b.proxy, host).TrafficPolicy(p, subset).GetLoadBalancer())
		},
		Report: func(reason string) { b.problems.report(vs.Key(), reason) },
	})
	if routes == nil {
		return nil, nil
	}
	vh := &route.VirtualHost{Name: hostPort(svc.Hostname, port), Domains: hosts, Routes: routes, IncludeRequestAttemptCount: true}
	vb, err := lrMarshal.Marshal(vh)
	if err != nil {
		return nil, err
	}
	return vb[:len(vb):len(vb)], nil
}

// hashPolicy is the request hash for the service port's consistent-hash
// load balancer, from the DestinationRule the proxy resolves. Tunnel
// settings have no meaning for HTTP traffic and are reported as ignored.
func (b *routeBuild) hashPolicy(svc *model.Service, port uint32, dr *pushcontext.DestinationRule) []*route.RouteAction_HashPolicy {
	if dr == nil {
		return nil
	}
	policy := dr.TrafficPolicy(port, "")
	if policy.GetTunnel() != nil {
		b.problems.report(ruleKey(dr), fmt.Sprintf(
			"trafficPolicy.tunnel ignored for %s port %d: tunnels apply to TCP ports, and this port is HTTP",
			svc.Hostname, port))
	}
	return HashPolicy(policy.GetLoadBalancer())
}
