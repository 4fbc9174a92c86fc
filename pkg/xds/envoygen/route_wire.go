package envoygen

import (
	"fmt"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// vhostEncoder writes a service's virtual host straight in protobuf wire
// format: the part of a sidecar's configuration that grows with the mesh
// (one per service and HTTP port) is marshalled without building messages,
// strings or reflection, which made it several times cheaper. The fixed
// parts are marshalled once by the protobuf library; the result is byte
// for byte what proto.Marshal gives for the equivalent message (rds_test.go
// checks).
//
// The virtual host is:
//
//	name: "host:port"
//	domains: each name, without a port
//	routes:
//	- match: {prefix: /}
//	  route:
//	    cluster: outbound|port||host
//	    timeout: 0s, retry_policy: Istio's default
//	    hash_policy: the rule's, if any
//	    max_stream_duration: {grpc_timeout_header_max: 0s}
//	  decorator: {operation: "host:port/*"}
//	  name: default
//	include_request_attempt_count: true
type vhostEncoder struct {
	vhName, vhDomains, vhRoutes protowire.Number
	routeAction, routeDecorator protowire.Number
	actionCluster               protowire.Number
	decoratorOperation          protowire.Number

	routeMatch   []byte // Route.match, the whole field
	routeName    []byte // Route.name = "default", the whole field
	actionFixed  []byte // RouteAction.timeout and retry_policy fields
	actionTail   []byte // RouteAction.max_stream_duration field
	attemptCount []byte // VirtualHost.include_request_attempt_count field
}

func fieldNumber(d protoreflect.MessageDescriptor, name protoreflect.Name) protowire.Number {
	f := d.Fields().ByName(name)
	if f == nil {
		panic(fmt.Sprintf("envoygen: %s has no field %s", d.FullName(), name))
	}
	return f.Number()
}

func newVhostEncoder(p *routeParts) *vhostEncoder {
	vh := (&route.VirtualHost{}).ProtoReflect().Descriptor()
	rt := (&route.Route{}).ProtoReflect().Descriptor()
	act := (&route.RouteAction{}).ProtoReflect().Descriptor()
	dec := (&route.Decorator{}).ProtoReflect().Descriptor()
	e := &vhostEncoder{
		vhName:             fieldNumber(vh, "name"),
		vhDomains:          fieldNumber(vh, "domains"),
		vhRoutes:           fieldNumber(vh, "routes"),
		routeAction:        fieldNumber(rt, "route"),
		routeDecorator:     fieldNumber(rt, "decorator"),
		actionCluster:      fieldNumber(act, "cluster"),
		decoratorOperation: fieldNumber(dec, "operation"),
	}
	// The fixed fields sit, in field number order, before the decorator
	// (match), after it (name), around the hash policy (timeout and retry
	// policy before it, max stream duration after it) and last in the
	// virtual host (include_request_attempt_count).
	// TestVhostEncoderMatchesProto guards these positions.
	e.routeMatch = mustMarshalLR(&route.Route{Match: p.matchAll})
	e.routeName = mustMarshalLR(&route.Route{Name: defaultRouteName})
	e.actionFixed = mustMarshalLR(&route.RouteAction{Timeout: p.noTimeout, RetryPolicy: p.defaultRetry})
	e.actionTail = mustMarshalLR(&route.RouteAction{MaxStreamDuration: p.outboundStreamMax})
	e.attemptCount = mustMarshalLR(&route.VirtualHost{IncludeRequestAttemptCount: true})
	return e
}

// hashPolicyField marshals a route action's hash_policy field(s).
func hashPolicyField(hash []*route.RouteAction_HashPolicy) ([]byte, error) {
	if len(hash) == 0 {
		return nil, nil
	}
	return lrMarshal.Marshal(&route.RouteAction{HashPolicy: hash})
}

func sizeBytesField(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func appendFieldHeader(b []byte, num protowire.Number, n int) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(n))
}

// appendHostPort appends the string field "host:port".
func appendHostPort(b []byte, num protowire.Number, host, port string) []byte {
	b = appendFieldHeader(b, num, len(host)+1+len(port))
	b = append(b, host...)
	b = append(b, ':')
	return append(b, port...)
}

// size returns the marshalled size of the virtual host of service host
// (named hosts, see vhostHosts) on port; hash is hashPolicyField's bytes.
func (e *vhostEncoder) size(host, port string, hosts []string, hash []byte) int {
	nameLen := len(host) + 1 + len(port)
	clusterLen := len("outbound|") + len(port) + len("||") + len(host)
	action := sizeBytesField(e.actionCluster, clusterLen) + len(e.actionFixed) + len(hash) + len(e.actionTail)
	decorator := sizeBytesField(e.decoratorOperation, nameLen+2)
	rt := len(e.routeMatch) + sizeBytesField(e.routeAction, action) + sizeBytesField(e.routeDecorator, decorator) + len(e.routeName)
	n := sizeBytesField(e.vhName, nameLen) + sizeBytesField(e.vhRoutes, rt) + len(e.attemptCount)
	for _, h := range hosts {
		n += sizeBytesField(e.vhDomains, len(h))
	}
	return n
}

// append appends the virtual host's bytes (without a field header; see
// size for its arguments).
func (e *vhostEncoder) append(b []byte, host, port string, hosts []string, hash []byte) []byte {
	nameLen := len(host) + 1 + len(port)
	clusterLen := len("outbound|") + len(port) + len("||") + len(host)
	action := sizeBytesField(e.actionCluster, clusterLen) + len(e.actionFixed) + len(hash) + len(e.actionTail)
	decorator := sizeBytesField(e.decoratorOperation, nameLen+2)
	rt := len(e.routeMatch) + sizeBytesField(e.routeAction, action) + sizeBytesField(e.routeDecorator, decorator) + len(e.routeName)

	b = appendHostPort(b, e.vhName, host, port)
	for _, h := range hosts {
		b = protowire.AppendTag(b, e.vhDomains, protowire.BytesType)
		b = protowire.AppendString(b, h)
	}
	// The protobuf library writes fields in number order with oneof
	// members (the route action, and its cluster) last; so does this.
	b = appendFieldHeader(b, e.vhRoutes, rt)
	b = append(b, e.routeMatch...)
	b = appendFieldHeader(b, e.routeDecorator, decorator)
	b = appendFieldHeader(b, e.decoratorOperation, nameLen+2)
	b = append(b, host...)
	b = append(b, ':')
	b = append(b, port...)
	b = append(b, "/*"...)
	b = append(b, e.routeName...)
	b = appendFieldHeader(b, e.routeAction, action)
	b = append(b, e.actionFixed...)
	b = append(b, hash...)
	b = append(b, e.actionTail...)
	b = appendFieldHeader(b, e.actionCluster, clusterLen)
	b = append(b, "outbound|"...)
	b = append(b, port...)
	b = append(b, "||"...)
	b = append(b, host...)
	return append(b, e.attemptCount...)
}

func mustMarshalLR(m proto.Message) []byte {
	b, err := lrMarshal.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}
