package envoygen

import (
	"net/netip"
	"strconv"
	"strings"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previoushosts "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/pkg/model"
)

const (
	defaultRouteName = "default"
	// allowAnyName names the catch-all virtual host and its route that send
	// unknown hosts out through PassthroughCluster (Istio's ALLOW_ANY).
	allowAnyName = "allow_any"
)

// routeParts are the immutable pieces every route shares. Protobuf marshals
// shared sub-messages safely from many goroutines as long as nobody
// mutates them, and sharing saves an allocation per route.
type routeParts struct {
	noTimeout         *durationpb.Duration
	outboundStreamMax *route.RouteAction_MaxStreamDuration
	defaultRetry      *route.RetryPolicy
	matchAll          *route.RouteMatch
}

func newRouteParts() *routeParts {
	zero := durationpb.New(0)
	return &routeParts{
		noTimeout: zero,
		// A grpc-timeout header is honoured as sent; nothing else limits
		// stream duration (Istio's default of no timeout).
		outboundStreamMax: &route.RouteAction_MaxStreamDuration{GrpcTimeoutHeaderMax: zero},
		// Istio's mesh-wide default retry policy for outbound HTTP. Like
		// Istio since 1.24 it lists no retriable status code: a 503 may
		// come from an application that acted on the request, and
		// repeating a request that is not idempotent is not safe.
		defaultRetry: &route.RetryPolicy{
			RetryOn:    "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes",
			NumRetries: wrapperspb.UInt32(2),
			RetryHostPredicate: []*route.RetryPolicy_RetryHostPredicate{{
				Name:       previousHostsRetryPredicate,
				ConfigType: &route.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: mustPackLR(&previoushosts.PreviousHostsPredicate{})},
			}},
			HostSelectionRetryMaxAttempts: 5,
		},
		matchAll: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
	}
}

// traceOperation is Istio's decorator for a service's default route.
func traceOperation(host string, port uint32) string {
	return host + ":" + strconv.FormatUint(uint64(port), 10) + "/*"
}

// hostPort is a virtual host's name: "host:port".
func hostPort(host string, port uint32) string {
	return host + ":" + strconv.FormatUint(uint64(port), 10)
}

// allowAnyVirtualHost catches every host no service claims and forwards it
// to its original destination.
func (p *routeParts) allowAnyVirtualHost() *route.VirtualHost {
	return &route.VirtualHost{
		Name:    allowAnyName,
		Domains: []string{"*"},
		Routes: []*route.Route{{
			Name:  allowAnyName,
			Match: p.matchAll,
			Action: &route.Route_Route{Route: &route.RouteAction{
				ClusterSpecifier:  &route.RouteAction_Cluster{Cluster: PassthroughCluster},
				Timeout:           p.noTimeout,
				MaxStreamDuration: p.outboundStreamMax,
			}},
		}},
		IncludeRequestAttemptCount: true,
	}
}

// inboundDefaultRoute forwards every request on an inbound port to the
// workload, without timeouts.
func inboundDefaultRoute(cluster, operation string) *route.Route {
	zero := durationpb.New(0)
	return &route.Route{
		Name:  defaultRouteName,
		Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
		Action: &route.Route_Route{Route: &route.RouteAction{
			ClusterSpecifier:  &route.RouteAction_Cluster{Cluster: cluster},
			Timeout:           zero,
			MaxStreamDuration: &route.RouteAction_MaxStreamDuration{MaxStreamDuration: zero, GrpcTimeoutHeaderMax: zero},
		}},
		Decorator: &route.Decorator{Operation: operation},
	}
}

// vhostHosts appends the host names (without port) by which a proxy in
// proxyNamespace may address svc, in Istio's order: the FQDN, the short
// names its DNS search path resolves (name, name.ns.svc and name.ns in the
// same namespace; name.ns and name.ns.svc from others), then the same for
// each of svc's aliases (ExternalName Services whose CNAME leads to svc,
// so requests for them arrive with their names), then svc's cluster IPs
// (IPv6 in brackets, as in a Host header).
func vhostHosts(dst []string, svc *model.Service, aliases []*model.Service, proxyNamespace string) []string {
	dst = appendServiceNames(dst, svc, proxyNamespace)
	for _, a := range aliases {
		dst = appendServiceNames(dst, a, proxyNamespace)
	}
	for _, ip := range svc.ClusterIPs {
		if addr, err := netip.ParseAddr(ip); err == nil && addr.Is6() {
			ip = "[" + ip + "]"
		}
		dst = append(dst, ip)
	}
	return dst
}

// appendServiceNames appends svc's FQDN and the short names that a proxy
// in proxyNamespace may use for it.
func appendServiceNames(dst []string, svc *model.Service, proxyNamespace string) []string {
	dst = append(dst, svc.Hostname)
	if proxyNamespace != "" && hasKubernetesHostname(svc) {
		nameNs := svc.Hostname[:len(svc.Name)+1+len(svc.Namespace)]
		nameNsSvc := svc.Hostname[:len(nameNs)+len(".svc")]
		if svc.Namespace == proxyNamespace {
			dst = append(dst, svc.Name, nameNsSvc, nameNs)
		} else {
			dst = append(dst, nameNs, nameNsSvc)
		}
	}
	return dst
}

// hasKubernetesHostname reports whether svc's hostname is
// <name>.<namespace>.svc.<domain>, so its short forms are meaningful.
func hasKubernetesHostname(svc *model.Service) bool {
	h := svc.Hostname
	return svc.Name != "" && svc.Namespace != "" &&
		!strings.Contains(svc.Name, ".") && !strings.Contains(svc.Namespace, ".") &&
		len(h) > len(svc.Name)+len(svc.Namespace)+len("..svc.") &&
		strings.HasPrefix(h, svc.Name) && h[len(svc.Name)] == '.' &&
		strings.HasPrefix(h[len(svc.Name)+1:], svc.Namespace) &&
		strings.HasPrefix(h[len(svc.Name)+1+len(svc.Namespace):], ".svc.")
}
