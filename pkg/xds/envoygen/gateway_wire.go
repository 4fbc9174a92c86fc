package envoygen

import (
	"strconv"
	"strings"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// gatewayVhostEncoder writes an Ingress host's virtual host straight in
// protobuf wire format, as vhostEncoder does for services: a gateway with
// thousands of Ingresses has thousands of virtual hosts, and building and
// marshalling messages for them cost most of the gateway's translation.
// The bytes equal proto.Marshal's for the equivalent message
// (TestGatewayVhostEncoderMatchesProto):
//
//	name: host
//	domains: [host]
//	routes: one per Ingress route, most specific first:
//	- match: {path | path_separated_prefix | prefix: /}
//	  decorator: {operation: "<service host>:<port>/*"}
//	  name: "<ingress namespace>/<ingress name>"
//	  route:
//	    timeout: 0s, retry_policy: Istio's default
//	    max_stream_duration: {grpc_timeout_header_max: 0s}
//	    cluster: outbound|port||host
//	include_request_attempt_count: true
type gatewayVhostEncoder struct {
	*vhostEncoder
	routeMatchField, routeNameField     protowire.Number
	matchPath, matchPathSeparatedPrefix protowire.Number
}

func newGatewayVhostEncoder(e *vhostEncoder) *gatewayVhostEncoder {
	rt := (&route.Route{}).ProtoReflect().Descriptor()
	m := (&route.RouteMatch{}).ProtoReflect().Descriptor()
	return &gatewayVhostEncoder{
		vhostEncoder:             e,
		routeMatchField:          fieldNumber(rt, "match"),
		routeNameField:           fieldNumber(rt, "name"),
		matchPath:                fieldNumber(m, "path"),
		matchPathSeparatedPrefix: fieldNumber(m, "path_separated_prefix"),
	}
}

// gatewayMatch is how one Ingress route matches, decided by gatewayMatchOf.
type gatewayMatch struct {
	field protowire.Number // 0: prefix "/"
	value string
}

// matchSize is the size of the Route.match field, header included.
func (e *gatewayVhostEncoder) matchSize(m gatewayMatch) int {
	if m.field == 0 {
		return len(e.routeMatch)
	}
	return sizeBytesField(e.routeMatchField, sizeBytesField(m.field, len(m.value)))
}

func (e *gatewayVhostEncoder) appendMatch(b []byte, m gatewayMatch) []byte {
	if m.field == 0 {
		return append(b, e.routeMatch...)
	}
	b = appendFieldHeader(b, e.routeMatchField, sizeBytesField(m.field, len(m.value)))
	b = protowire.AppendTag(b, m.field, protowire.BytesType)
	return protowire.AppendString(b, m.value)
}

// gatewayRouteParts are the lengths of one route's variable parts.
type gatewayRouteParts struct {
	match                    gatewayMatch
	port                     string
	name, operation, cluster int // lengths
	action, decorator, route int // encoded sizes, without their own header
}

func (e *gatewayVhostEncoder) routeParts(r *pushcontext.IngressRoute, m gatewayMatch) gatewayRouteParts {
	p := gatewayRouteParts{match: m, port: strconv.FormatUint(uint64(r.Port), 10)}
	p.name = len(r.From.Namespace) + 1 + len(r.From.Name)
	p.operation = len(r.Host) + 1 + len(p.port) + 2
	p.cluster = len(r.Cluster)
	p.action = len(e.actionFixed) + len(e.actionTail) + sizeBytesField(e.actionCluster, p.cluster)
	p.decorator = sizeBytesField(e.decoratorOperation, p.operation)
	p.route = e.matchSize(m) + sizeBytesField(e.routeDecorator, p.decorator) +
		sizeBytesField(e.routeNameField, p.name) + sizeBytesField(e.routeAction, p.action)
	return p
}

func (e *gatewayVhostEncoder) appendRoute(b []byte, r *pushcontext.IngressRoute, p gatewayRouteParts) []byte {
	b = appendFieldHeader(b, e.vhRoutes, p.route)
	b = e.appendMatch(b, p.match)
	b = appendFieldHeader(b, e.routeDecorator, p.decorator)
	b = appendFieldHeader(b, e.decoratorOperation, p.operation)
	b = append(b, r.Host...)
	b = append(b, ':')
	b = append(b, p.port...)
	b = append(b, "/*"...)
	b = appendFieldHeader(b, e.routeNameField, p.name)
	b = append(b, r.From.Namespace...)
	b = append(b, '/')
	b = append(b, r.From.Name...)
	b = appendFieldHeader(b, e.routeAction, p.action)
	b = append(b, e.actionFixed...)
	b = append(b, e.actionTail...)
	b = appendFieldHeader(b, e.actionCluster, p.cluster)
	return append(b, r.Cluster...)
}

// encode returns the virtual host's bytes; match gives each route's
// match, ok false for a route to leave out.
func (e *gatewayVhostEncoder) encode(vh *pushcontext.IngressVirtualHost, match func(*pushcontext.IngressRoute) (gatewayMatch, bool)) []byte {
	parts := make([]gatewayRouteParts, 0, len(vh.Routes))
	kept := make([]*pushcontext.IngressRoute, 0, len(vh.Routes))
	size := sizeBytesField(e.vhName, len(vh.Host)) + sizeBytesField(e.vhDomains, len(vh.Host)) + len(e.attemptCount)
	for _, r := range vh.Routes {
		m, ok := match(r)
		if !ok {
			continue
		}
		p := e.routeParts(r, m)
		size += sizeBytesField(e.vhRoutes, p.route)
		parts = append(parts, p)
		kept = append(kept, r)
	}
	b := make([]byte, 0, size)
	b = protowire.AppendTag(b, e.vhName, protowire.BytesType)
	b = protowire.AppendString(b, vh.Host)
	b = protowire.AppendTag(b, e.vhDomains, protowire.BytesType)
	b = protowire.AppendString(b, vh.Host)
	for i, r := range kept {
		b = e.appendRoute(b, r, parts[i])
	}
	return append(b, e.attemptCount...)
}

// gatewayMatchOf translates an Ingress path: Exact is Envoy's path match;
// Prefix matches whole path elements, which is Envoy's
// path_separated_prefix, without the trailing slash Kubernetes ignores
// ("/foo/" is "/foo"); "/" matches everything. ok is false for a path
// Envoy would refuse (the index should have refused it already).
func (e *gatewayVhostEncoder) gatewayMatchOf(r *pushcontext.IngressRoute) (gatewayMatch, bool) {
	if len(r.Path) == 0 || r.Path[0] != '/' || strings.ContainsAny(r.Path, "?#") {
		return gatewayMatch{}, false
	}
	if r.PathType == model.PathTypeExact {
		return gatewayMatch{field: e.matchPath, value: r.Path}, true
	}
	prefix := r.Path
	for len(prefix) > 0 && prefix[len(prefix)-1] == '/' {
		prefix = prefix[:len(prefix)-1]
	}
	if prefix == "" {
		return gatewayMatch{}, true
	}
	return gatewayMatch{field: e.matchPathSeparatedPrefix, value: prefix}, true
}
