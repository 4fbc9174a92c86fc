package loadassign

import (
	"fmt"
	"unicode/utf8"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// claWire writes a ClusterLoadAssignment straight in protobuf wire format.
// Load assignments are the bulk of a cold push (one per cluster, a few
// nested messages per endpoint), and the protobuf library's reflective
// marshalling of them cost more than the rest of a sidecar's configuration
// together. The output is byte for byte what deterministic proto.Marshal
// gives for the equivalent message (wire_test.go checks), so hashes and
// versions do not depend on which path produced an assignment.
//
// The message written is:
//
//	cluster_name: name                    (omitted when empty)
//	endpoints: per group
//	  locality: {region, zone, sub_zone}  (always present; empty parts omitted)
//	  lb_endpoints: per endpoint
//	    health_status: HEALTHY | UNHEALTHY | DRAINING
//	    metadata: the tlsMode match (only for endpoints whose pods carry
//	              security.istio.io/tlsMode=istio)
//	    endpoint.address.socket_address: {address, port_value}
//	  load_balancing_weight: {value}      (always present; value omitted when 0)
//	  priority                            (omitted when 0)
//
// Like the protobuf library, fields go in number order, with members of a
// oneof (LbEndpoint.endpoint, Address.socket_address,
// SocketAddress.port_value) after all other fields; a oneof member is
// written even when it holds a zero value.
type claWire struct {
	claName, claGroups                        protowire.Number
	groupLocality, groupEndpoints             protowire.Number
	groupWeight, groupPriority                protowire.Number
	region, zone, subZone                     protowire.Number
	lbHealth, lbMetadata, lbEndpoint          protowire.Number
	endpointAddress, addressSocket            protowire.Number
	socketHost, socketPort                    protowire.Number
	wrappedValue                              protowire.Number
	claNameField, socketHostField, localField protoreflect.FullName
}

// claEncoding is immutable after package initialisation.
var claEncoding = newCLAWire()

func newCLAWire() *claWire {
	cla := (&endpoint.ClusterLoadAssignment{}).ProtoReflect().Descriptor()
	group := (&endpoint.LocalityLbEndpoints{}).ProtoReflect().Descriptor()
	loc := (&core.Locality{}).ProtoReflect().Descriptor()
	lb := (&endpoint.LbEndpoint{}).ProtoReflect().Descriptor()
	ep := (&endpoint.Endpoint{}).ProtoReflect().Descriptor()
	addr := (&core.Address{}).ProtoReflect().Descriptor()
	sock := (&core.SocketAddress{}).ProtoReflect().Descriptor()
	wrapped := (&wrapperspb.UInt32Value{}).ProtoReflect().Descriptor()
	return &claWire{
		claName:         fieldNumber(cla, "cluster_name"),
		claGroups:       fieldNumber(cla, "endpoints"),
		groupLocality:   fieldNumber(group, "locality"),
		groupEndpoints:  fieldNumber(group, "lb_endpoints"),
		groupWeight:     fieldNumber(group, "load_balancing_weight"),
		groupPriority:   fieldNumber(group, "priority"),
		region:          fieldNumber(loc, "region"),
		zone:            fieldNumber(loc, "zone"),
		subZone:         fieldNumber(loc, "sub_zone"),
		lbHealth:        fieldNumber(lb, "health_status"),
		lbMetadata:      fieldNumber(lb, "metadata"),
		lbEndpoint:      fieldNumber(lb, "endpoint"),
		endpointAddress: fieldNumber(ep, "address"),
		addressSocket:   fieldNumber(addr, "socket_address"),
		socketHost:      fieldNumber(sock, "address"),
		socketPort:      fieldNumber(sock, "port_value"),
		wrappedValue:    fieldNumber(wrapped, "value"),
		claNameField:    cla.Fields().ByName("cluster_name").FullName(),
		socketHostField: sock.Fields().ByName("address").FullName(),
		localField:      loc.FullName(),
	}
}

func fieldNumber(d protoreflect.MessageDescriptor, name protoreflect.Name) protowire.Number {
	f := d.Fields().ByName(name)
	if f == nil {
		panic(fmt.Sprintf("loadassign: %s has no field %s", d.FullName(), name))
	}
	return f.Number()
}

// Marshal encodes the assignment. Sizes are computed first, so the result
// is one allocation of exactly the encoded length, whatever the endpoint
// count. Like proto.Marshal, it fails on strings that are not UTF-8. It
// uses l's scratch space, so a layout is not for concurrent use.
func (l *Layout) Marshal() ([]byte, error) {
	w := claEncoding
	if !utf8.ValidString(l.Name) {
		return nil, invalidUTF8(w.claNameField, l.Name)
	}
	size := 0
	if l.Name != "" {
		size = sizeLen(w.claName, len(l.Name))
	}
	// Assignments have a handful of groups; their sizes stay on the stack.
	// Endpoint sizes go to the layout's scratch, kept across pooled uses.
	var groupSizes [8]int
	sizes := groupSizes[:0]
	endpoints := 0
	for i := range l.Groups {
		endpoints += len(l.Groups[i].Endpoints)
	}
	if cap(l.sizes) < endpoints {
		l.sizes = make([]lbEndpointSizes, 0, endpoints)
	}
	l.sizes = l.sizes[:0]
	for i := range l.Groups {
		n, err := w.groupSize(&l.Groups[i], &l.sizes)
		if err != nil {
			return nil, err
		}
		sizes = append(sizes, n)
		size += sizeLen(w.claGroups, n)
	}
	b := make([]byte, 0, size)
	if l.Name != "" {
		b = protowire.AppendTag(b, w.claName, protowire.BytesType)
		b = protowire.AppendString(b, l.Name)
	}
	epSizes := l.sizes
	for i := range l.Groups {
		g := &l.Groups[i]
		b = w.appendGroup(b, g, sizes[i], epSizes[:len(g.Endpoints)])
		epSizes = epSizes[len(g.Endpoints):]
	}
	if len(b) != size {
		// A size and its append disagree: a bug here, never bad input.
		return nil, fmt.Errorf("loadassign: load assignment %q encoded to %d bytes, sized %d", l.Name, len(b), size)
	}
	return b, nil
}

func invalidUTF8(field protoreflect.FullName, value string) error {
	return fmt.Errorf("loadassign: field %s contains invalid UTF-8: %q", field, value)
}

func sizeLen(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func sizeString(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return sizeLen(num, len(s))
}

func sizeUint(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func appendLen(b []byte, num protowire.Number, n int) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(n))
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func (w *claWire) localitySize(l model.Locality) int {
	return sizeString(w.region, l.Region) + sizeString(w.zone, l.Zone) + sizeString(w.subZone, l.SubZone)
}

// groupSize is the encoded size of g without its own field header; it also
// checks the group's strings, and appends its endpoints' sizes to sizes.
func (w *claWire) groupSize(g *Group, sizes *[]lbEndpointSizes) (int, error) {
	loc := g.Locality
	if !utf8.ValidString(loc.Region) || !utf8.ValidString(loc.Zone) || !utf8.ValidString(loc.SubZone) {
		return 0, invalidUTF8(w.localField, loc.Region+"/"+loc.Zone+"/"+loc.SubZone)
	}
	n := sizeLen(w.groupLocality, w.localitySize(loc)) +
		sizeLen(w.groupWeight, sizeUint(w.wrappedValue, uint64(g.Weight))) +
		sizeUint(w.groupPriority, uint64(g.Priority))
	for _, ep := range g.Endpoints {
		if !utf8.ValidString(ep.Address) {
			return 0, invalidUTF8(w.socketHostField, ep.Address)
		}
		s := w.lbEndpointSizes(ep)
		*sizes = append(*sizes, s)
		n += sizeLen(w.groupEndpoints, int(s.lb))
	}
	return n, nil
}

// Auto mTLS: clusters pick mutual TLS for the endpoints whose metadata
// carries envoy.transport_socket_match {tlsMode: istio} (Envoy's
// Cluster.transport_socket_matches), and the endpoints of pods the injector
// labelled security.istio.io/tlsMode=istio (model.Endpoint.MTLS) get it.
// The metadata is the same for every such endpoint, so it is marshalled
// once.
var tlsModeIstioMetadata = mustMarshalDeterministic(&core.Metadata{
	FilterMetadata: map[string]*structpb.Struct{
		"envoy.transport_socket_match": {Fields: map[string]*structpb.Value{
			"tlsMode": structpb.NewStringValue(model.TLSModeIstio),
		}},
	},
})

func mustMarshalDeterministic(m proto.Message) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic("loadassign: " + err.Error())
	}
	return b
}

// lbEndpointSizes are the encoded sizes of the messages nested in one
// LbEndpoint, innermost first.
type lbEndpointSizes struct {
	socket, address, endpoint, lb uint32
}

func (w *claWire) lbEndpointSizes(ep *model.Endpoint) lbEndpointSizes {
	socket := sizeString(w.socketHost, ep.Address) + protowire.SizeTag(w.socketPort) + protowire.SizeVarint(uint64(ep.Port))
	address := sizeLen(w.addressSocket, socket)
	endpoint := sizeLen(w.endpointAddress, address)
	lb := sizeUint(w.lbHealth, uint64(healthStatus(ep.Health))) + sizeLen(w.lbEndpoint, endpoint)
	if ep.MTLS {
		lb += sizeLen(w.lbMetadata, len(tlsModeIstioMetadata))
	}
	return lbEndpointSizes{uint32(socket), uint32(address), uint32(endpoint), uint32(lb)}
}

// appendGroup appends g as a field of the assignment; size and sizes (its
// endpoints') are what groupSize found.
func (w *claWire) appendGroup(b []byte, g *Group, size int, sizes []lbEndpointSizes) []byte {
	b = appendLen(b, w.claGroups, size)
	b = appendLen(b, w.groupLocality, w.localitySize(g.Locality))
	b = appendString(b, w.region, g.Locality.Region)
	b = appendString(b, w.zone, g.Locality.Zone)
	b = appendString(b, w.subZone, g.Locality.SubZone)
	for i, ep := range g.Endpoints {
		s := &sizes[i]
		b = appendLen(b, w.groupEndpoints, int(s.lb))
		b = appendUint(b, w.lbHealth, uint64(healthStatus(ep.Health)))
		if ep.MTLS {
			b = appendLen(b, w.lbMetadata, len(tlsModeIstioMetadata))
			b = append(b, tlsModeIstioMetadata...)
		}
		b = appendLen(b, w.lbEndpoint, int(s.endpoint))
		b = appendLen(b, w.endpointAddress, int(s.address))
		b = appendLen(b, w.addressSocket, int(s.socket))
		b = appendString(b, w.socketHost, ep.Address)
		b = protowire.AppendTag(b, w.socketPort, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(ep.Port))
	}
	b = appendLen(b, w.groupWeight, sizeUint(w.wrappedValue, uint64(g.Weight)))
	b = appendUint(b, w.wrappedValue, uint64(g.Weight))
	return appendUint(b, w.groupPriority, uint64(g.Priority))
}
