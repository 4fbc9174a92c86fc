package envoygen

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// gatewayRoutes are every route configuration of the gateway for one push
// context, by name, marshalled once for all gateway replicas.
type gatewayRoutes struct {
	byName map[string]model.Resource
	names  []string // sorted
}

type gatewayRoutesKey struct{}

func (g *RouteGenerator) gatewayRoutes(gen *lrGeneration, push *pushcontext.PushContext, gw *pushcontext.IngressGateway) (*gatewayRoutes, error) {
	v, err := gen.get(gatewayRoutesKey{}, func() (any, error) {
		b := gatewayRouteBuild{g: g, problems: lrProblems{logger: g.opts.Logger, push: push}}
		return b.build(gw)
	})
	if err != nil {
		return nil, err
	}
	return v.(*gatewayRoutes), nil
}

// generateGateway serves the gateway's RDS: every requested name gets a
// configuration (an empty one for a name the gateway does not have, so
// that Envoy never waits for it); a wildcard subscription gets them all.
func (g *RouteGenerator) generateGateway(push *pushcontext.PushContext, gw *pushcontext.IngressGateway, w *model.WatchedResource) (model.Resources, error) {
	routes, err := g.gatewayRoutes(g.cache.generation(push.Version()), push, gw)
	if err != nil {
		return nil, err
	}
	names := w.ResourceNames
	if w.Wildcard {
		names = slices.Concat(routes.names, w.ResourceNames)
		slices.Sort(names)
		names = slices.Compact(names)
	}
	out := make(model.Resources, 0, len(names))
	for _, name := range names {
		res, ok := routes.byName[name]
		if !ok {
			if res, err = emptyRouteConfiguration(name); err != nil {
				return nil, err
			}
		}
		out = append(out, res)
	}
	return out, nil
}

func emptyRouteConfiguration(name string) (model.Resource, error) {
	b, err := lrMarshal.Marshal(&route.RouteConfiguration{Name: name, ValidateClusters: wrapperspb.Bool(false)})
	if err != nil {
		return model.Resource{}, err
	}
	return model.Resource{Name: name, Resource: &anypb.Any{TypeUrl: RouteType, Value: b}}, nil
}

// gatewayRouteBuild is the state of building the gateway's routes.
type gatewayRouteBuild struct {
	g        *RouteGenerator
	problems lrProblems
}

func (b *gatewayRouteBuild) build(gw *pushcontext.IngressGateway) (*gatewayRoutes, error) {
	out := &gatewayRoutes{byName: map[string]model.Resource{}}
	// Each virtual host is marshalled once: the HTTP configuration and the
	// HTTPS chains that serve its host share the bytes.
	vhosts := b.g.gatewayVhosts.encodeAll(gw.HTTP, b.virtualHost)
	add := func(name string, include []int) error {
		head, err := routeConfigurationHead(name)
		if err != nil {
			return err
		}
		size := len(head)
		for _, i := range include {
			size += sizeBytesField(virtualHostsField, len(vhosts[i]))
		}
		buf := make([]byte, 0, size)
		buf = append(buf, head...)
		for _, i := range include {
			buf = appendVirtualHost(buf, vhosts[i])
		}
		out.byName[name] = model.Resource{Name: name, Resource: &anypb.Any{TypeUrl: RouteType, Value: buf}}
		out.names = append(out.names, name)
		return nil
	}
	if gw.HTTPPort != 0 {
		all := make([]int, len(gw.HTTP))
		for i := range all {
			all[i] = i
		}
		if err := add(GatewayHTTPRouteName(gw.HTTPPort), all); err != nil {
			return nil, err
		}
	}
	// Problems with TLS entries are the listener generator's to report.
	if chains := gatewayChains(gw, nil); len(chains) > 0 {
		idx := newVhostIndex(gw.HTTP)
		for i := range chains {
			if err := add(chains[i].routeName, idx.servedBy(&chains[i])); err != nil {
				return nil, err
			}
		}
	}
	slices.Sort(out.names)
	return out, nil
}

// vhostIndex finds the virtual hosts a chain serves without testing every
// host against every chain.
type vhostIndex struct {
	vhosts    []*pushcontext.IngressVirtualHost
	byHost    map[string]int // lower-cased host, for plain hosts
	wildcards []int          // "*.suffix" hosts
	anyHost   int            // -1 if none
}

func newVhostIndex(vhosts []*pushcontext.IngressVirtualHost) *vhostIndex {
	idx := &vhostIndex{vhosts: vhosts, byHost: make(map[string]int, len(vhosts)), anyHost: -1}
	for i, vh := range vhosts {
		switch {
		case vh.Host == anyHost:
			idx.anyHost = i
		case strings.HasPrefix(vh.Host, "*"):
			idx.wildcards = append(idx.wildcards, i)
		default:
			idx.byHost[strings.ToLower(vh.Host)] = i
		}
	}
	return idx
}

// servedBy returns the positions of the virtual hosts c serves (see
// gatewayChain.serves), in order.
func (idx *vhostIndex) servedBy(c *gatewayChain) []int {
	if c.serverNames == nil {
		all := make([]int, len(idx.vhosts))
		for i := range all {
			all[i] = i
		}
		return all
	}
	var out []int
	for _, n := range c.serverNames {
		if strings.HasPrefix(n, "*") {
			for i, vh := range idx.vhosts {
				if hostCovers(n, vh.Host) {
					out = append(out, i)
				}
			}
		} else if i, ok := idx.byHost[n]; ok {
			out = append(out, i)
		}
		for _, i := range idx.wildcards {
			if hostCovers(idx.vhosts[i].Host, n) {
				out = append(out, i)
			}
		}
	}
	if idx.anyHost >= 0 {
		out = append(out, idx.anyHost)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// vhostBytes keeps each virtual host's marshalled bytes across push
// contexts. The index hands out the very same IngressVirtualHost while
// nothing that went into it changed (and never mutates one), so the
// pointer is the key; only the hosts of the latest build are kept.
type vhostBytes struct {
	mu    sync.Mutex
	bytes map[*pushcontext.IngressVirtualHost][]byte
}

func (c *vhostBytes) encodeAll(vhosts []*pushcontext.IngressVirtualHost, encode func(*pushcontext.IngressVirtualHost) []byte) [][]byte {
	c.mu.Lock()
	prev := c.bytes
	c.mu.Unlock()
	next := make(map[*pushcontext.IngressVirtualHost][]byte, len(vhosts))
	out := make([][]byte, len(vhosts))
	for i, vh := range vhosts {
		vb, ok := prev[vh]
		if !ok {
			vb = encode(vh)
		}
		next[vh] = vb
		out[i] = vb
	}
	c.mu.Lock()
	c.bytes = next
	c.mu.Unlock()
	return out
}

// virtualHost encodes one Ingress host's routes, named after the host. The
// connection manager strips the port from the Host header, so the host
// itself is the only domain ("*" for rules without a host).
func (b *gatewayRouteBuild) virtualHost(vh *pushcontext.IngressVirtualHost) []byte {
	enc := b.g.gatewayEncoder
	return enc.encode(vh, func(r *pushcontext.IngressRoute) (gatewayMatch, bool) {
		m, ok := enc.gatewayMatchOf(r)
		if !ok {
			b.problems.report(ingressKey(r.From), fmt.Sprintf("path %q dropped: not an absolute path", r.Path))
		}
		return m, ok
	})
}
