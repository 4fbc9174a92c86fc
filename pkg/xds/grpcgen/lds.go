package grpcgen

import (
	"fmt"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

const (
	routerFilterName = "envoy.filters.http.router"
	hcmFilterName    = "envoy.filters.network.http_connection_manager"
)

// ListenerGenerator serves LDS: client-side API listeners named after the
// dial target ("host:port") and server-side inbound listeners named
// InboundListenerPrefix + "ip:port".
type ListenerGenerator struct {
	opts         Options
	routerConfig *anypb.Any
	serverMTLS   *core.TransportSocket
}

// NewListenerGenerator returns the LDS generator.
func NewListenerGenerator(opts Options) *ListenerGenerator {
	rc, err := marshalAny(&router.Router{})
	if err != nil {
		panic(fmt.Sprintf("marshal empty router config: %v", err)) // cannot happen for an empty message
	}
	return &ListenerGenerator{opts: opts.withDefaults(), routerConfig: rc, serverMTLS: newServerMTLS()}
}

// Generate implements Generator. Names that do not resolve to a visible
// service port, or are not valid inbound names, are left out.
func (g *ListenerGenerator) Generate(proxy *model.Proxy, push *pushcontext.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	if push == nil {
		return nil, fmt.Errorf("grpcgen: no push context")
	}
	var out model.Resources
	var emitted nameSet
	var inbound *inboundPolicy
	if w.Wildcard {
		emitted = nameSet{}
		for _, svc := range push.ServicesVisibleTo(proxy.Namespace) {
			served := servedAs(push, proxy.Namespace, svc)
			for _, p := range served.Ports {
				name := hostPort(svc.Hostname, p.Port)
				res, err := g.clientListener(name)
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
		var (
			res model.Resource
			ok  bool
			err error
		)
		if addr, isInbound := strings.CutPrefix(name, InboundListenerPrefix); isInbound {
			if inbound == nil {
				inbound = newInboundPolicy(push, proxy)
			}
			res, ok, err = g.inboundListener(name, addr, inbound)
		} else if svc, _ := resolveTarget(push, g.opts.DomainSuffix, proxy.Namespace, name); svc != nil {
			res, err = g.clientListener(name)
			ok = true
		}
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, res)
			emitted.add(name)
		}
	}
	return out, nil
}

// clientListener is the API listener a gRPC channel reads for target name; its
// routes come over ADS under the same name.
func (g *ListenerGenerator) clientListener(name string) (model.Resource, error) {
	manager := &hcm.HttpConnectionManager{
		StatPrefix: "outbound|" + name,
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			ConfigSource:    adsConfigSource(),
			RouteConfigName: name,
		}},
		HttpFilters: g.httpFilters(),
	}
	managerAny, err := marshalAny(manager)
	if err != nil {
		return model.Resource{}, err
	}
	return marshalResource(name, &listener.Listener{
		Name:        name,
		ApiListener: &listener.ApiListener{ApiListener: managerAny},
	})
}

// inboundListener is what a gRPC xDS server listening on addr reads. gRPC
// requires the address to equal its real listen address and the routes to be
// non-forwarding. Its one filter chain is mutual TLS or plaintext, as the
// server's PeerAuthentication mode for the port says.
func (g *ListenerGenerator) inboundListener(name, addr string, inbound *inboundPolicy) (model.Resource, bool, error) {
	ip, port, ok := splitHostPort(addr)
	if !ok {
		return model.Resource{}, false, nil
	}
	portStr := strconv.FormatUint(uint64(port), 10)
	manager := &hcm.HttpConnectionManager{
		StatPrefix: "inbound|" + portStr,
		RouteSpecifier: &hcm.HttpConnectionManager_RouteConfig{RouteConfig: &route.RouteConfiguration{
			Name: "inbound|" + portStr,
			VirtualHosts: []*route.VirtualHost{{
				Name:    "inbound|grpc|" + portStr,
				Domains: []string{"*"},
				Routes: []*route.Route{{
					Match:  &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
					Action: &route.Route_NonForwardingAction{NonForwardingAction: &route.NonForwardingAction{}},
				}},
			}},
		}},
		HttpFilters: g.httpFilters(),
	}
	managerAny, err := marshalAny(manager)
	if err != nil {
		return model.Resource{}, false, err
	}
	res, err := marshalResource(name, &listener.Listener{
		Name: name,
		Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
			Address:       ip,
			PortSpecifier: &core.SocketAddress_PortValue{PortValue: port},
		}}},
		TrafficDirection: core.TrafficDirection_INBOUND,
		FilterChains: []*listener.FilterChain{{
			Name: "inbound|" + portStr,
			Filters: []*listener.Filter{{
				Name:       hcmFilterName,
				ConfigType: &listener.Filter_TypedConfig{TypedConfig: managerAny},
			}},
			TransportSocket: g.serverTransportSocket(inbound.mode(port)),
		}},
	})
	return res, err == nil, err
}

// httpFilters is the filter list gRPC requires: the router, last.
func (g *ListenerGenerator) httpFilters() []*hcm.HttpFilter {
	return []*hcm.HttpFilter{{
		Name:       routerFilterName,
		ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: g.routerConfig},
	}}
}

func adsConfigSource() *core.ConfigSource {
	return &core.ConfigSource{
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
		ResourceApiVersion:    core.ApiVersion_V3,
	}
}
