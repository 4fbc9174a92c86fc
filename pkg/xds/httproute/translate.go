package httproute

import (
	"fmt"
	"strconv"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
	"github.com/meshpilot/meshpilot/pkg/xds/loadassign"
)

// Flavor is the kind of client the routes are for.
type Flavor uint8

const (
	// Envoy sidecars take the whole route API.
	Envoy Flavor = iota
	// GRPC is proxyless gRPC (gRFC A28 and its successors).
	GRPC
)

// Input is what one translation needs.
type Input struct {
	Flavor Flavor
	Proxy  *model.Proxy
	Push   *pushcontext.PushContext
	VS     *pushcontext.VirtualService
	// Host and Port are the service port whose virtual host the routes
	// serve.
	Host string
	Port uint32
	// DefaultRetry is the retry policy of a route whose VirtualService
	// says nothing about retries (Envoy flavour; nil for none).
	DefaultRetry *route.RetryPolicy
	// HashPolicy gives the request hash of a destination's consistent-hash
	// load balancer, from its DestinationRule's policy for the port and
	// subset (a subset's own consistentHash makes its cluster a ring hash,
	// which hashes nothing without it); nil when it has none.
	HashPolicy func(host string, port uint32, subset string) []*route.RouteAction_HashPolicy
	// Report records that part of the VirtualService was left out, or
	// points nowhere; the reason names the field.
	Report func(reason string)
}

// Routes translates the VirtualService's HTTP routes for the service port,
// in order: the first route whose match a request satisfies takes it, as
// in Istio. A route with several matches becomes one xDS route per match.
// It returns nil when no route applies to the port, and then the service's
// default route should be used.
func Routes(in Input) []*route.Route {
	t := &translation{in: in}
	var out []*route.Route
	for i, r := range in.VS.Spec.GetHttp() {
		field := fmt.Sprintf("http[%d]", i)
		if r.GetDelegate() != nil {
			t.drop(field+".delegate", "delegate VirtualServices are not served; the route is left out")
			continue
		}
		matches := r.GetMatch()
		if len(matches) == 0 {
			matches = []*networking.HTTPMatchRequest{nil}
		}
		var action *route.Route // built once, shared by the route's matches
		for j, m := range matches {
			if m != nil && !t.appliesTo(m) {
				continue
			}
			rm, ok := t.routeMatch(m, fmt.Sprintf("%s.match[%d]", field, j))
			if !ok {
				continue
			}
			if action == nil {
				action = t.action(r, field)
			}
			rt := &route.Route{
				Name:                    routeName(r, m),
				Match:                   rm,
				Action:                  action.Action,
				Decorator:               action.Decorator,
				RequestHeadersToAdd:     action.RequestHeadersToAdd,
				RequestHeadersToRemove:  action.RequestHeadersToRemove,
				ResponseHeadersToAdd:    action.ResponseHeadersToAdd,
				ResponseHeadersToRemove: action.ResponseHeadersToRemove,
			}
			out = append(out, rt)
		}
	}
	return out
}

// routeName is Istio's: the route's name, joined with its match's.
func routeName(r *networking.HTTPRoute, m *networking.HTTPMatchRequest) string {
	if m.GetName() == "" {
		return r.GetName()
	}
	if r.GetName() == "" {
		return m.GetName()
	}
	return r.GetName() + "." + m.GetName()
}

type translation struct {
	in Input
}

func (t *translation) drop(field, reason string) {
	if t.in.Report != nil {
		t.in.Report(fmt.Sprintf("%s: %s (service %s port %d)", field, reason, t.in.Host, t.in.Port))
	}
}

// action translates what a route does: a redirect, a direct response, or
// forwarding to weighted destinations with its timeout, retries,
// rewrites, header edits and mirrors. The result is a Route without match
// or name.
func (t *translation) action(r *networking.HTTPRoute, field string) *route.Route {
	out := &route.Route{}
	grpc := t.in.Flavor == GRPC
	switch {
	case r.GetRedirect() != nil:
		if grpc {
			t.drop(field+".redirect", "gRPC clients cannot follow redirects; matching calls fail")
		}
		out.Action = &route.Route_Redirect{Redirect: redirect(r.GetRedirect())}
	case r.GetDirectResponse() != nil:
		if grpc {
			t.drop(field+".directResponse", "gRPC clients cannot be answered directly; matching calls fail")
		}
		out.Action = &route.Route_DirectResponse{DirectResponse: directResponse(r.GetDirectResponse())}
	default:
		action, decorated := t.forward(r, field)
		out.Action = &route.Route_Route{Route: action}
		if !grpc && decorated != "" {
			out.Decorator = &route.Decorator{Operation: decorated}
		}
	}
	t.unsupported(r, field)
	if h := r.GetHeaders(); h != nil {
		if grpc {
			t.drop(field+".headers", "gRPC clients cannot edit headers; ignored for them")
		} else {
			out.RequestHeadersToAdd, out.RequestHeadersToRemove = headerEdits(h.GetRequest())
			out.ResponseHeadersToAdd, out.ResponseHeadersToRemove = headerEdits(h.GetResponse())
		}
	}
	return out
}

// unsupported reports the route features neither client is served yet:
// they need HTTP filters that meshpilot's listeners do not carry.
func (t *translation) unsupported(r *networking.HTTPRoute, field string) {
	if r.GetFault() != nil {
		t.drop(field+".fault", "fault injection is not served yet; ignored")
	}
	if r.GetCorsPolicy() != nil {
		t.drop(field+".corsPolicy", "CORS policies are not served yet; ignored")
	}
}

// forward is the route action of a forwarding route, and the operation
// name Istio decorates it with.
func (t *translation) forward(r *networking.HTTPRoute, field string) (*route.RouteAction, string) {
	grpc := t.in.Flavor == GRPC
	action := &route.RouteAction{}
	var dests []weighted
	for i, d := range r.GetRoute() {
		if d.GetWeight() == 0 && len(r.GetRoute()) > 1 {
			continue // Istio drops zero-weight destinations
		}
		dests = append(dests, weighted{key: t.destination(d.GetDestination(), fmt.Sprintf("%s.route[%d].destination", field, i)), weight: d.GetWeight()})
		if d.GetHeaders() != nil {
			t.drop(fmt.Sprintf("%s.route[%d].headers", field, i), "per-destination header edits are not served yet; ignored")
		}
	}
	operation := ""
	switch len(dests) {
	case 0:
		// Validation refuses this; route nowhere rather than anywhere.
		action.ClusterSpecifier = &route.RouteAction_Cluster{Cluster: "BlackHoleCluster"}
		t.drop(field+".route", "no destination with weight; calls fail")
	case 1:
		d := dests[0]
		action.ClusterSpecifier = &route.RouteAction_Cluster{Cluster: d.key.cluster()}
		operation = d.key.host + ":" + strconv.FormatUint(uint64(d.key.port), 10) + "/*"
		if t.in.HashPolicy != nil {
			action.HashPolicy = t.in.HashPolicy(d.key.host, d.key.port, d.key.subset)
		}
	default:
		wc := &route.WeightedCluster{}
		for _, d := range dests {
			wc.Clusters = append(wc.Clusters, &route.WeightedCluster_ClusterWeight{
				Name: d.key.cluster(), Weight: wrapperspb.UInt32(uint32(d.weight)),
			})
		}
		action.ClusterSpecifier = &route.RouteAction_WeightedClusters{WeightedClusters: wc}
		operation = t.in.Host + ":" + strconv.FormatUint(uint64(t.in.Port), 10) + "/*"
	}
	t.timeout(action, r.GetTimeout())
	action.RetryPolicy = t.retry(r.GetRetries(), field+".retries")
	if rw := r.GetRewrite(); rw != nil {
		if grpc {
			t.drop(field+".rewrite", "gRPC clients cannot rewrite calls; ignored")
		} else {
			rewrite(action, rw)
		}
	}
	t.mirrors(action, r, field)
	return action, operation
}

type weighted struct {
	key    clusterKey
	weight int32
}

type clusterKey struct {
	host   string
	port   uint32
	subset string
}

func (k clusterKey) cluster() string { return loadassign.ClusterName(k.host, k.port, k.subset) }

// destination resolves a route destination to a cluster: its host in the
// VirtualService's namespace, its port (the one given; else the service's
// only port; else the port being routed), its subset. Destinations that
// point at nothing are reported and kept, as Istio keeps them: the calls
// fail, visibly, instead of going elsewhere.
func (t *translation) destination(d *networking.Destination, field string) clusterKey {
	key := clusterKey{host: t.in.VS.ResolveHost(d.GetHost()), port: d.GetPort().GetNumber(), subset: d.GetSubset()}
	svc := t.in.Push.ServiceForHostname(key.host)
	if target := t.in.Push.AliasTarget(t.in.Proxy.Namespace, svc); target != nil {
		// An alias has no clusters: its clients use its target's, as Istio
		// routes a destination that names an ExternalName alias.
		key.host, svc = target.Hostname, target
	}
	if key.port == 0 {
		key.port = t.in.Port
		if svc != nil && len(svc.Ports) == 1 {
			key.port = svc.Ports[0].Port
		}
	}
	switch {
	case svc == nil:
		t.drop(field+".host", fmt.Sprintf("%s is not a known service; calls routed to it fail", key.host))
	case svc.PortByNumber(key.port) == nil:
		t.drop(field+".port", fmt.Sprintf("service %s has no port %d; calls routed to it fail", key.host, key.port))
	case key.subset != "" && t.in.Push.DestinationRuleForProxy(t.in.Proxy, key.host).Subset(key.subset) == nil:
		t.drop(field+".subset", fmt.Sprintf("no DestinationRule defines subset %q of %s; calls routed to it fail", key.subset, key.host))
	}
	return key
}

// timeout sets a route timeout. Without one Istio sets none (0s): calls
// may take as long as they like. Envoy then still caps a call by the
// grpc-timeout header it carries; gRPC enforces its own deadlines, and the
// route's as its maximum stream duration.
func (t *translation) timeout(action *route.RouteAction, d *durationpb.Duration) {
	if d == nil {
		d = durationpb.New(0)
	}
	if t.in.Flavor == GRPC {
		if d.AsDuration() > 0 {
			action.MaxStreamDuration = &route.RouteAction_MaxStreamDuration{MaxStreamDuration: d}
		}
		return
	}
	action.Timeout = d
	action.MaxStreamDuration = &route.RouteAction_MaxStreamDuration{GrpcTimeoutHeaderMax: d}
}
