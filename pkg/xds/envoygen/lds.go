package envoygen

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// ListenerGenerator serves LDS to Envoy sidecars: virtualOutbound (15001),
// one outbound listener per HTTP port ("0.0.0.0_<port>", routes over RDS)
// and per TCP service port ("<cluster IP>_<port>", tcp_proxy), and
// virtualInbound (15006) with a chain per port of the proxy's own workload.
// The ingress gateway (a router the push context recognises) gets the
// listeners of the Ingresses (gateway_listeners.go); other routers get none.
//
// Outbound listeners depend on the proxy's namespace (and its labels when
// workload-selected DestinationRules exist there); virtualInbound depends
// on the ports of its workload. Both are built once per push context
// version and shared by every proxy with the same inputs.
type ListenerGenerator struct {
	opts              Options
	httpFilters       []*hcm.HttpFilter
	originalDstConfig *anypb.Any
	virtualOutbound   model.Resource
	tlsInspector      *anypb.Any
	// inboundTLSHTTP and inboundTLSTCP terminate mutual TLS on inbound
	// chains (listener_inbound_tls.go).
	inboundTLSHTTP, inboundTLSTCP *anypb.Any
	views                         outboundViews

	// gatewayPrev are the ingress gateway's last listeners, reused while
	// their inputs stay the same.
	gatewayMu   sync.Mutex
	gatewayPrev builtGatewayListeners
	cache       lrCache
}

// NewListenerGenerator returns the LDS generator.
func NewListenerGenerator(opts Options) Generator {
	return newListenerGenerator(opts)
}

func newListenerGenerator(opts Options) *ListenerGenerator {
	vo, err := buildVirtualOutbound()
	if err != nil {
		panic(err) // fixed messages; marshalling cannot fail
	}
	return &ListenerGenerator{
		opts:              opts.withDefaults(),
		httpFilters:       routerOnlyFilters(),
		originalDstConfig: mustPackLR(newOriginalDstConfig()),
		virtualOutbound:   vo,
		tlsInspector:      newTLSInspectorConfig(),
		inboundTLSHTTP:    newInboundTLSContext(true),
		inboundTLSTCP:     newInboundTLSContext(false),
	}
}

// routerOnlyFilters is the HTTP filter list of every HCM: the router, which
// must be last.
func routerOnlyFilters() []*hcm.HttpFilter {
	return []*hcm.HttpFilter{{
		Name:       routerHTTPFilter,
		ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: mustPackLR(&router.Router{})},
	}}
}

type outboundListenersKey struct{ scope proxyRuleScope }

type virtualInboundKey struct{ signature string }

// Generate implements Generator. The result is sorted by listener name.
func (g *ListenerGenerator) Generate(proxy *model.Proxy, push *pushcontext.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	if push == nil {
		return nil, fmt.Errorf("envoygen: no push context")
	}
	if proxy.Type != model.SidecarProxy {
		if gw := gatewayFor(proxy, push); gw != nil {
			res, err := g.gatewayListeners(g.cache.generation(push.Version()), push, gw)
			return filterByName(res, w), err
		}
		return model.Resources{}, nil
	}
	gen := g.cache.generation(push.Version())
	scope := ruleScopeOf(proxy, push)
	outbound, err := gen.get(outboundListenersKey{scope}, func() (any, error) {
		b := outboundBuild{g: g, gen: gen, push: push, proxy: proxy, problems: lrProblems{logger: g.opts.Logger, push: push}}
		res, err := b.listeners(g.views.get(push, proxy.Namespace))
		slices.SortFunc(res, func(a, b model.Resource) int { return strings.Compare(a.Name, b.Name) })
		return res, err
	})
	if err != nil {
		return nil, err
	}
	ports := inboundChainsFor(push, proxy)
	inbound, err := gen.get(virtualInboundKey{ports.signature()}, func() (any, error) {
		return g.buildVirtualInbound(ports)
	})
	if err != nil {
		return nil, err
	}
	shared := outbound.(model.Resources)
	out := make(model.Resources, 0, len(shared)+2)
	out = append(out, shared...)
	// Per-port listener names start with an address, so they sort before
	// the virtual listeners, which sort inbound first.
	out = append(out, inbound.(model.Resource), g.virtualOutbound)
	return filterByName(out, w), nil
}
