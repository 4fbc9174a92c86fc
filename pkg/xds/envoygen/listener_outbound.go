package envoygen

import (
	"fmt"
	"net"
	"strconv"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// outboundListenerName is Istio's "<bind address>_<port>".
func outboundListenerName(ip string, port uint32) string {
	return ip + "_" + strconv.FormatUint(uint64(port), 10)
}

// outboundBuild is the state of building one scope's outbound listeners.
type outboundBuild struct {
	g        *ListenerGenerator
	gen      *lrGeneration
	push     *pushcontext.PushContext
	proxy    *model.Proxy
	problems lrProblems

	newKeys      []listenerKey
	newListeners []model.Resource
	tcpScratch   *tcpListenerScratch
}

// listenerKey is what one per-port listener depends on; proxies of all
// namespaces that resolve the same rule for a service share its listener.
// An HTTP listener depends on its port alone (svc is nil).
type listenerKey struct {
	svc  *model.Service
	port uint32
	rule *pushcontext.DestinationRule
}

// record adds a listener this build made to the push's shared table
// (when the build ends).
func (b *outboundBuild) record(key listenerKey, res model.Resource) {
	b.newKeys = append(b.newKeys, key)
	b.newListeners = append(b.newListeners, res)
}

// listeners returns the outbound per-port listeners of a view: one shared
// HTTP listener per HTTP port, one TCP listener per TCP service port.
func (b *outboundBuild) listeners(view *outboundView) (model.Resources, error) {
	out := make(model.Resources, 0, len(view.httpPorts)+len(view.tcpTargets))
	for _, t := range view.reserved {
		b.problems.report(serviceKey(t.svc), fmt.Sprintf(
			"port %d has no outbound listener: the sidecar's virtual listeners use it", t.port.Port))
	}
	defer func() { b.gen.listeners.addAll(b.newKeys, b.newListeners) }()
	for _, port := range view.httpPorts {
		key := listenerKey{port: port}
		res, ok := b.gen.listeners.get(key)
		if !ok {
			var err error
			if res, err = b.httpListener(port); err != nil {
				return nil, err
			}
			b.record(key, res)
		}
		out = append(out, res)
	}
	// Cluster IPs are unique in Kubernetes, but a YAML source can repeat
	// one; Envoy would reject two listeners of the same name.
	taken := make(map[string]*model.Service, len(view.tcpTargets))
	for _, t := range view.tcpTargets {
		if len(t.svc.ClusterIPs) == 0 {
			b.problems.report(serviceKey(t.svc), noClusterIPReason(t))
			continue
		}
		name := outboundListenerName(t.svc.ClusterIPs[0], t.port.Port)
		if owner, dup := taken[name]; dup {
			b.problems.report(serviceKey(t.svc), fmt.Sprintf(
				"port %d has no outbound listener: cluster IP %s is also used by service %s/%s",
				t.port.Port, t.svc.ClusterIPs[0], owner.Namespace, owner.Name))
			continue
		}
		taken[name] = t.svc
		dr := b.push.DestinationRuleForProxy(b.proxy, t.svc.Hostname)
		key := listenerKey{svc: t.svc, port: t.port.Port, rule: dr}
		res, ok := b.gen.listeners.get(key)
		if !ok {
			var err error
			if res, err = b.tcpListener(name, t, dr); err != nil {
				return nil, err
			}
			b.record(key, res)
		}
		out = append(out, res)
	}
	return out, nil
}

// noClusterIPReason says why a TCP port of a service without a cluster IP
// has no listener. Clients of an ExternalName service connect to what its
// name resolves to, which the virtual outbound listener passes through
// unchanged, as before the mesh.
func noClusterIPReason(t serviceTarget) string {
	why := "the service is headless"
	if t.svc.IsExternalName() {
		why = "an ExternalName service has none; connections to its name's addresses pass through"
	}
	return fmt.Sprintf("port %d (%s) has no outbound listener: TCP ports need a cluster IP and %s", t.port.Port, t.port.Protocol, why)
}

// httpListener is the listener every HTTP service on port shares; the
// virtual hosts of its route configuration tell the services apart.
func (b *outboundBuild) httpListener(port uint32) (model.Resource, error) {
	name := outboundListenerName(wildcardAddress, port)
	manager := &hcm.HttpConnectionManager{
		CodecType:  hcm.HttpConnectionManager_AUTO,
		StatPrefix: "outbound_" + name,
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			ConfigSource:    adsRouteSource(),
			RouteConfigName: OutboundRouteName(port),
		}},
		HttpFilters: b.g.httpFilters,
	}
	applyMeshHTTPDefaults(manager)
	managerAny, err := packLR(manager)
	if err != nil {
		return model.Resource{}, err
	}
	return packResourceLR(name, outboundListener(name, wildcardAddress, nil, port, networkFilter(httpConnectionManagerFilter, managerAny)))
}

// tcpListener forwards everything sent to the service's cluster IP and port
// to the service's default cluster, tunnelled when the DestinationRule says so.
func (b *outboundBuild) tcpListener(name string, t serviceTarget, dr *pushcontext.DestinationRule) (model.Resource, error) {
	if b.tcpScratch == nil {
		b.tcpScratch = newTCPListenerScratch()
	}
	var tunnel *tcp.TcpProxy_TunnelingConfig
	if dr != nil {
		tunnel = b.tunnelingConfig(dr, t)
	}
	ips := t.svc.ClusterIPs
	value, err := b.tcpScratch.build(name, ips[0], ips[1:], t.port.Port, OutboundClusterName(t.svc.Hostname, t.port.Port, ""), tunnel)
	if err != nil {
		return model.Resource{}, err
	}
	return model.Resource{Name: name, Resource: &anypb.Any{TypeUrl: ListenerType, Value: value}}, nil
}

// tunnelingConfig translates trafficPolicy.tunnel the way Istio does: the
// TCP stream is carried in an HTTP CONNECT (or POST) to the service, asking
// for targetHost:targetPort. Port-level settings cannot carry a tunnel, so
// the resolved policy for the port holds the top-level one.
func (b *outboundBuild) tunnelingConfig(dr *pushcontext.DestinationRule, t serviceTarget) *tcp.TcpProxy_TunnelingConfig {
	tunnel := dr.TrafficPolicy(t.port.Port, "").GetTunnel()
	if tunnel == nil {
		return nil
	}
	if reason := invalidTunnel(tunnel); reason != "" {
		b.problems.report(ruleKey(dr), fmt.Sprintf("trafficPolicy.tunnel ignored for %s port %d: %s",
			t.svc.Hostname, t.port.Port, reason))
		return nil
	}
	return &tcp.TcpProxy_TunnelingConfig{
		Hostname: net.JoinHostPort(tunnel.GetTargetHost(), strconv.FormatUint(uint64(tunnel.GetTargetPort()), 10)),
		UsePost:  tunnel.GetProtocol() == "POST",
	}
}

// invalidTunnel says what Istio's validation would reject in tunnel
// settings, or "" when they are usable.
func invalidTunnel(t *networking.TrafficPolicy_TunnelSettings) string {
	switch t.GetProtocol() {
	case "", "CONNECT", "POST":
	default:
		return fmt.Sprintf("protocol %q is neither CONNECT nor POST", t.GetProtocol())
	}
	if t.GetTargetHost() == "" {
		return "targetHost is empty"
	}
	if p := t.GetTargetPort(); p == 0 || p > 65535 {
		return fmt.Sprintf("targetPort %d is not a valid port", p)
	}
	return ""
}

// outboundListener is a per-port listener that binds nothing: the virtual
// outbound listener hands it the connections whose original destination it
// matches.
func outboundListener(name, ip string, extraIPs []string, port uint32, filter *listener.Filter) *listener.Listener {
	l := &listener.Listener{
		Name:                             name,
		Address:                          socketAddress(ip, port),
		FilterChains:                     []*listener.FilterChain{{Filters: []*listener.Filter{filter}}},
		BindToPort:                       wrapperspb.Bool(false),
		TrafficDirection:                 core.TrafficDirection_OUTBOUND,
		ListenerFiltersTimeout:           durationpb.New(0),
		ContinueOnListenerFiltersTimeout: true,
	}
	for _, extra := range extraIPs {
		l.AdditionalAddresses = append(l.AdditionalAddresses, &listener.AdditionalAddress{Address: socketAddress(extra, port)})
	}
	return l
}

func networkFilter(name string, config *anypb.Any) *listener.Filter {
	return &listener.Filter{Name: name, ConfigType: &listener.Filter_TypedConfig{TypedConfig: config}}
}

// applyMeshHTTPDefaults sets what Istio sets on every sidecar HCM: no
// stream idle timeout, websocket upgrades, path normalisation without
// touching escaped slashes, and no trust in the downstream address.
func applyMeshHTTPDefaults(m *hcm.HttpConnectionManager) {
	m.UseRemoteAddress = wrapperspb.Bool(false)
	m.UpgradeConfigs = []*hcm.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket"}}
	m.StreamIdleTimeout = durationpb.New(0)
	m.NormalizePath = wrapperspb.Bool(true)
	m.PathWithEscapedSlashesAction = hcm.HttpConnectionManager_KEEP_UNCHANGED
}
