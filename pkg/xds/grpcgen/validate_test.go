package grpcgen

import (
	"errors"
	"fmt"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
)

// resourceName is the name a resource carries inside itself.
func resourceName(m proto.Message) string {
	switch r := m.(type) {
	case *listener.Listener:
		return r.GetName()
	case *route.RouteConfiguration:
		return r.GetName()
	case *cluster.Cluster:
		return r.GetName()
	case *endpoint.ClusterLoadAssignment:
		return r.GetClusterName()
	}
	return ""
}

// grpcAccepts checks the rules grpc-go v1.85 enforces beyond Envoy's
// validation (shared/notes/grpc-xds-shapes.md).
func grpcAccepts(m proto.Message) error {
	switch r := m.(type) {
	case *listener.Listener:
		return grpcAcceptsListener(r)
	case *route.RouteConfiguration:
		return grpcAcceptsRoutes(r, false)
	case *cluster.Cluster:
		return grpcAcceptsCluster(r)
	case *endpoint.ClusterLoadAssignment:
		return grpcAcceptsLoadAssignment(r)
	}
	return fmt.Errorf("unexpected resource %T", m)
}

func grpcAcceptsListener(l *listener.Listener) error {
	if api := l.GetApiListener().GetApiListener(); api != nil {
		manager := &hcm.HttpConnectionManager{}
		if err := api.UnmarshalTo(manager); err != nil {
			return err
		}
		rds := manager.GetRds()
		if rds == nil || rds.GetConfigSource().GetAds() == nil || rds.GetConfigSource().GetResourceApiVersion() != core.ApiVersion_V3 {
			return fmt.Errorf("listener %s: routes must come from ADS v3", l.GetName())
		}
		if rds.GetRouteConfigName() != l.GetName() {
			return fmt.Errorf("listener %s: route config %q", l.GetName(), rds.GetRouteConfigName())
		}
		return routerLast(manager)
	}
	want, ok := strings.CutPrefix(l.GetName(), InboundListenerPrefix)
	if !ok {
		return fmt.Errorf("listener %s: neither an API listener nor inbound", l.GetName())
	}
	sa := l.GetAddress().GetSocketAddress()
	if got := hostPort(bracketIPv6(sa.GetAddress()), sa.GetPortValue()); got != want {
		return fmt.Errorf("listener %s: address %s", l.GetName(), got)
	}
	if len(l.GetFilterChains()) == 0 {
		return fmt.Errorf("listener %s: no filter chains", l.GetName())
	}
	for _, fc := range l.GetFilterChains() {
		if len(fc.GetFilters()) != 1 {
			return fmt.Errorf("listener %s: want one network filter", l.GetName())
		}
		manager := &hcm.HttpConnectionManager{}
		if err := fc.GetFilters()[0].GetTypedConfig().UnmarshalTo(manager); err != nil {
			return err
		}
		if err := routerLast(manager); err != nil {
			return err
		}
		if err := grpcAcceptsRoutes(manager.GetRouteConfig(), true); err != nil {
			return err
		}
		if ts := fc.GetTransportSocket(); ts != nil {
			if err := grpcAcceptsServerTLS(ts); err != nil {
				return fmt.Errorf("listener %s: %w", l.GetName(), err)
			}
		}
	}
	return nil
}

func bracketIPv6(ip string) string {
	if strings.Contains(ip, ":") {
		return "[" + ip + "]"
	}
	return ip
}

func routerLast(manager *hcm.HttpConnectionManager) error {
	filters := manager.GetHttpFilters()
	if len(filters) == 0 {
		return errors.New("no http filters")
	}
	last := filters[len(filters)-1]
	if !last.GetTypedConfig().MessageIs(&router.Router{}) {
		return fmt.Errorf("last http filter is %s, not the router", last.GetTypedConfig().GetTypeUrl())
	}
	return nil
}

func grpcAcceptsRoutes(rc *route.RouteConfiguration, inbound bool) error {
	if rc == nil || len(rc.GetVirtualHosts()) == 0 {
		return errors.New("no virtual hosts")
	}
	for _, vh := range rc.GetVirtualHosts() {
		if len(vh.GetDomains()) == 0 || len(vh.GetRoutes()) == 0 {
			return fmt.Errorf("virtual host %s: no domains or routes", vh.GetName())
		}
		for _, r := range vh.GetRoutes() {
			if inbound {
				if r.GetNonForwardingAction() == nil {
					return fmt.Errorf("inbound route in %s lacks non_forwarding_action", vh.GetName())
				}
				continue
			}
			if err := grpcAcceptsAction(r.GetRoute()); err != nil {
				return fmt.Errorf("route in %s: %v", vh.GetName(), err)
			}
		}
	}
	return nil
}

// grpcAcceptsAction checks a forwarding action as gRFC A28 has clients
// read it: one cluster, or weighted clusters whose weights add up to more
// than zero.
func grpcAcceptsAction(a *route.RouteAction) error {
	if wc := a.GetWeightedClusters(); wc != nil {
		var total uint32
		for _, c := range wc.GetClusters() {
			if !strings.HasPrefix(c.GetName(), "outbound|") {
				return fmt.Errorf("weighted cluster %q", c.GetName())
			}
			total += c.GetWeight().GetValue()
		}
		if total == 0 {
			return errors.New("weighted clusters add up to 0")
		}
		return nil
	}
	if !strings.HasPrefix(a.GetCluster(), "outbound|") {
		return fmt.Errorf("goes to %q", a.GetCluster())
	}
	return nil
}

func grpcAcceptsCluster(c *cluster.Cluster) error {
	switch c.GetType() {
	case cluster.Cluster_EDS:
		eds := c.GetEdsClusterConfig()
		if eds.GetEdsConfig().GetAds() == nil || eds.GetEdsConfig().GetResourceApiVersion() != core.ApiVersion_V3 {
			return fmt.Errorf("cluster %s: endpoints must come from ADS v3", c.GetName())
		}
		if eds.GetServiceName() != c.GetName() {
			return fmt.Errorf("cluster %s: service_name %q", c.GetName(), eds.GetServiceName())
		}
	case cluster.Cluster_LOGICAL_DNS:
		if err := grpcAcceptsDNSTarget(c.GetLoadAssignment()); err != nil {
			return fmt.Errorf("cluster %s: %w", c.GetName(), err)
		}
	default:
		return fmt.Errorf("cluster %s: type %s", c.GetName(), c.GetType())
	}
	switch c.GetLbPolicy() {
	case cluster.Cluster_ROUND_ROBIN, cluster.Cluster_LEAST_REQUEST:
	case cluster.Cluster_RING_HASH:
		if c.GetRingHashLbConfig().GetHashFunction() != cluster.Cluster_RingHashLbConfig_XX_HASH {
			return fmt.Errorf("cluster %s: ring hash needs XX_HASH", c.GetName())
		}
	default:
		return fmt.Errorf("cluster %s: lb policy %s", c.GetName(), c.GetLbPolicy())
	}
	if len(c.GetTransportSocketMatches()) > 0 {
		return fmt.Errorf("cluster %s: transport_socket_matches", c.GetName())
	}
	if ts := c.GetTransportSocket(); ts != nil {
		if err := grpcAcceptsClientTLS(ts); err != nil {
			return fmt.Errorf("cluster %s: %w", c.GetName(), err)
		}
	}
	return nil
}

// grpcAcceptsDNSTarget checks a LOGICAL_DNS cluster's load assignment as
// grpc-go's dnsHostNameFromCluster does: exactly one locality with exactly
// one endpoint, a socket address of a host and a non-zero port, with no
// custom resolver.
func grpcAcceptsDNSTarget(cla *endpoint.ClusterLoadAssignment) error {
	if len(cla.GetEndpoints()) != 1 || len(cla.GetEndpoints()[0].GetLbEndpoints()) != 1 {
		return errors.New("LOGICAL_DNS needs exactly one locality with exactly one endpoint")
	}
	sa := cla.GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if sa.GetAddress() == "" || sa.GetPortValue() == 0 || sa.GetResolverName() != "" {
		return fmt.Errorf("LOGICAL_DNS endpoint %v", sa)
	}
	return nil
}

func grpcAcceptsLoadAssignment(cla *endpoint.ClusterLoadAssignment) error {
	seen := map[string]bool{}
	localities := map[string]bool{}
	for _, group := range cla.GetEndpoints() {
		if group.GetLocality() == nil {
			return fmt.Errorf("%s: locality missing", cla.GetClusterName())
		}
		loc := group.GetLocality().String()
		if localities[loc] {
			return fmt.Errorf("%s: locality %v twice", cla.GetClusterName(), group.GetLocality())
		}
		localities[loc] = true
		if group.GetLoadBalancingWeight().GetValue() == 0 {
			return fmt.Errorf("%s: locality %v has no weight", cla.GetClusterName(), group.GetLocality())
		}
		for _, lbe := range group.GetLbEndpoints() {
			sa := lbe.GetEndpoint().GetAddress().GetSocketAddress()
			addr := hostPort(sa.GetAddress(), sa.GetPortValue())
			if seen[addr] {
				return fmt.Errorf("%s: duplicate address %s", cla.GetClusterName(), addr)
			}
			seen[addr] = true
		}
	}
	return nil
}
