package xds

import (
	"strings"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// Generator produces the resources of one type URL for one proxy. It must be
// a pure function of its arguments: the server calls it from many connection
// goroutines at once.
//
// On a Full request the result is the complete set for w. On an endpoint-only
// request (req.Full false) only EDS is regenerated, and the result may be
// partial: it holds only the ClusterLoadAssignments that the request touched,
// and an empty result means nothing to send.
type Generator interface {
	Generate(proxy *model.Proxy, push *pushcontext.PushContext, w *model.WatchedResource, req *model.PushRequest) (model.Resources, error)
}

// GeneratorFunc adapts a function to a Generator.
type GeneratorFunc func(proxy *model.Proxy, push *pushcontext.PushContext, w *model.WatchedResource, req *model.PushRequest) (model.Resources, error)

// Generate calls f.
func (f GeneratorFunc) Generate(proxy *model.Proxy, push *pushcontext.PushContext, w *model.WatchedResource, req *model.PushRequest) (model.Resources, error) {
	return f(proxy, push, w, req)
}

// Type URLs the server knows by name. Any other type URL is served when the
// proxy's generator set has a generator for it.
const (
	ListenerType = resourcev3.ListenerType
	RouteType    = resourcev3.RouteType
	ClusterType  = resourcev3.ClusterType
	EndpointType = resourcev3.EndpointType
	SecretType   = resourcev3.SecretType
	// AddressType is workload discovery (WDS) for node proxies, served
	// over delta ADS only (see deltaOnlyType); AuthorizationType are their
	// authorization policies.
	AddressType       = "type.googleapis.com/istio.workload.Address"
	AuthorizationType = "type.googleapis.com/istio.security.Authorization"
)

// pushOrder is the order a full push sends types in: clusters before their
// endpoints, listeners before their routes, so that a client never sees a
// reference to something it has not been sent yet (Envoy's make-before-break).
var pushOrder = map[string]int{ClusterType: 0, EndpointType: 1, ListenerType: 2, RouteType: 3, SecretType: 4}

// fullStateType reports whether a SotW response of this type replaces the
// client's whole set, so that a missing resource means deleted, and whether
// an empty first subscription means "everything" (wildcard). Istio's debug
// types are asked with no names (istioctl proxy-status) and answered whole.
func fullStateType(typeURL string) bool {
	return typeURL == ListenerType || typeURL == ClusterType || strings.HasPrefix(typeURL, DebugTypePrefix)
}

// deltaWildcardType reports whether a delta client that subscribes to no
// names in its first request of the type asks for everything. The xDS
// spec says so of LDS and CDS; Istio's own types (WDS) follow the same
// rule, so ztunnel's first request with no names is a wildcard.
func deltaWildcardType(typeURL string) bool {
	return fullStateType(typeURL) || typeURL == AddressType || typeURL == AuthorizationType
}

// deltaOnlyType reports whether typeURL is served over delta ADS only.
// Workload discovery is made of per-resource changes and removals: Istio's
// generator for it pushes only the changed addresses, which a SotW client
// would take for the whole set, and ztunnel only speaks delta. An empty
// SotW answer would tell a client that no workload exists (so no tunnel
// is needed), so a SotW subscription ends the stream with a clear error.
func deltaOnlyType(typeURL string) bool {
	return typeURL == AddressType
}

// shortType names a type URL in metrics and logs: cds, eds, lds, rds, sds, or
// the message name in lower case for anything else.
func shortType(typeURL string) string {
	switch typeURL {
	case ClusterType:
		return "cds"
	case EndpointType:
		return "eds"
	case ListenerType:
		return "lds"
	case RouteType:
		return "rds"
	case SecretType:
		return "sds"
	}
	if i := strings.LastIndexByte(typeURL, '.'); i >= 0 {
		return strings.ToLower(typeURL[i+1:])
	}
	return "unknown"
}
