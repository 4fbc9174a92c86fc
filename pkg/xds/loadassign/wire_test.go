package loadassign

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// referenceAssignment builds, as a message, the load assignment grpc-go is
// to receive for eps: usable endpoints (address and port set, first of each
// address:port), stably sorted by locality, one group per locality weighted
// by its endpoint count. It is the behaviour the wire encoder replaced,
// written plainly as the oracle for it.
func referenceAssignment(name string, eps []*model.Endpoint) *endpoint.ClusterLoadAssignment {
	var kept []*model.Endpoint
	seen := map[string]bool{}
	for _, ep := range eps {
		key := fmt.Sprintf("%s|%d", ep.Address, ep.Port)
		if ep.Address == "" || ep.Port == 0 || seen[key] {
			continue
		}
		seen[key] = true
		kept = append(kept, ep)
	}
	slices.SortStableFunc(kept, func(a, b *model.Endpoint) int {
		return strings.Compare(a.Locality.Region+"\x00"+a.Locality.Zone+"\x00"+a.Locality.SubZone,
			b.Locality.Region+"\x00"+b.Locality.Zone+"\x00"+b.Locality.SubZone)
	})
	cla := &endpoint.ClusterLoadAssignment{ClusterName: name}
	for _, ep := range kept {
		var g *endpoint.LocalityLbEndpoints
		if n := len(cla.Endpoints); n > 0 && sameLocality(cla.Endpoints[n-1].Locality, ep.Locality) {
			g = cla.Endpoints[n-1]
		} else {
			g = &endpoint.LocalityLbEndpoints{
				Locality:            &core.Locality{Region: ep.Locality.Region, Zone: ep.Locality.Zone, SubZone: ep.Locality.SubZone},
				LoadBalancingWeight: wrapperspb.UInt32(0),
			}
			cla.Endpoints = append(cla.Endpoints, g)
		}
		g.LbEndpoints = append(g.LbEndpoints, lbEndpointMessage(ep))
		g.LoadBalancingWeight.Value++
	}
	return cla
}

func sameLocality(l *core.Locality, m model.Locality) bool {
	return l.GetRegion() == m.Region && l.GetZone() == m.Zone && l.GetSubZone() == m.SubZone
}

func lbEndpointMessage(ep *model.Endpoint) *endpoint.LbEndpoint {
	health := map[model.HealthStatus]core.HealthStatus{
		model.Healthy: core.HealthStatus_HEALTHY, model.Unhealthy: core.HealthStatus_UNHEALTHY, model.Draining: core.HealthStatus_DRAINING,
	}[ep.Health]
	var metadata *core.Metadata
	if ep.MTLS {
		metadata = &core.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"envoy.transport_socket_match": {Fields: map[string]*structpb.Value{"tlsMode": structpb.NewStringValue("istio")}},
		}}
	}
	return &endpoint.LbEndpoint{
		HealthStatus: health,
		Metadata:     metadata,
		HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Address:       ep.Address,
				PortSpecifier: &core.SocketAddress_PortValue{PortValue: ep.Port},
			}}},
		}},
	}
}

// layoutMessage is the message a (possibly rearranged) layout stands for.
func layoutMessage(l *Layout) *endpoint.ClusterLoadAssignment {
	cla := &endpoint.ClusterLoadAssignment{ClusterName: l.Name}
	for _, g := range l.Groups {
		m := &endpoint.LocalityLbEndpoints{
			Locality:            &core.Locality{Region: g.Locality.Region, Zone: g.Locality.Zone, SubZone: g.Locality.SubZone},
			LoadBalancingWeight: wrapperspb.UInt32(g.Weight),
			Priority:            g.Priority,
		}
		for _, ep := range g.Endpoints {
			m.LbEndpoints = append(m.LbEndpoints, lbEndpointMessage(ep))
		}
		cla.Endpoints = append(cla.Endpoints, m)
	}
	return cla
}

func protoBytes(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkAssignment asserts that both encoding paths give the bytes
// proto.Marshal gives for the reference message.
func checkAssignment(t *testing.T, name string, eps []*model.Endpoint) {
	t.Helper()
	want := protoBytes(t, referenceAssignment(name, eps))
	res, err := buildLoadAssignment(name, eps)
	if err != nil {
		t.Fatal(err)
	}
	if res.Name != name || res.Resource.GetTypeUrl() != resource.EndpointType {
		t.Errorf("resource %q of type %q", res.Name, res.Resource.GetTypeUrl())
	}
	if !bytes.Equal(res.Resource.GetValue(), want) {
		t.Errorf("shared encoding differs from proto.Marshal:\n got %x\nwant %x", res.Resource.GetValue(), want)
	}
	fresh, err := NewLayout(name, eps).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fresh, want) {
		t.Errorf("layout encoding differs from proto.Marshal:\n got %x\nwant %x", fresh, want)
	}
	if cap(fresh) != len(fresh) {
		t.Errorf("encoding has capacity %d for %d bytes; sizing is off", cap(fresh), len(fresh))
	}
}

func ep(addr string, port uint32, loc model.Locality, health model.HealthStatus) *model.Endpoint {
	return &model.Endpoint{Address: addr, Port: port, Locality: loc, Health: health}
}

// labelled gives ep's workload the tlsMode label.
func labelled(e *model.Endpoint, tlsMode string) *model.Endpoint {
	e.Labels = map[string]string{model.TLSModeLabel: tlsMode, "app": "x"}
	e.MTLS = model.LabelledForMTLS(e.Labels)
	return e
}

func TestLoadAssignmentMatchesProto(t *testing.T) {
	east := model.Locality{Region: "us-east", Zone: "us-east-1a", SubZone: "rack1"}
	west := model.Locality{Region: "us-west", Zone: "us-west-1b"}
	regionOnly := model.Locality{Region: "eu"}
	many := func(n int, port uint32) []*model.Endpoint {
		var out []*model.Endpoint
		for i := range n {
			loc := []model.Locality{east, west, {}}[i%3]
			out = append(out, ep(fmt.Sprintf("10.0.%d.%d", i/250, i%250), port, loc, model.HealthStatus(i%3)))
		}
		return out
	}
	tests := []struct {
		name    string
		cluster string
		eps     []*model.Endpoint
	}{
		{"no endpoints", "outbound|80||a.ns.svc.cluster.local", nil},
		{"only unusable endpoints", "outbound|80||a", []*model.Endpoint{ep("", 80, east, model.Healthy), ep("10.0.0.1", 0, east, model.Healthy)}},
		{"one endpoint", "outbound|80||a", []*model.Endpoint{ep("10.0.0.1", 8080, east, model.Healthy)}},
		{"empty cluster name", "", []*model.Endpoint{ep("10.0.0.1", 8080, east, model.Healthy)}},
		{"empty locality", "c", []*model.Endpoint{ep("10.0.0.1", 80, model.Locality{}, model.Healthy), ep("10.0.0.2", 80, model.Locality{}, model.Draining)}},
		{"several localities, unsorted", "c", []*model.Endpoint{
			ep("10.0.0.1", 80, west, model.Healthy), ep("10.0.0.2", 80, east, model.Healthy),
			ep("10.0.0.3", 80, regionOnly, model.Healthy), ep("10.0.0.4", 80, west, model.Unhealthy),
			ep("10.0.0.5", 80, model.Locality{}, model.Healthy), ep("10.0.0.6", 80, model.Locality{SubZone: "s"}, model.Healthy),
		}},
		{"IPv6", "c", []*model.Endpoint{ep("fd00::1", 443, east, model.Healthy), ep("2001:db8:85a3::8a2e:370:7334", 443, east, model.Healthy)}},
		{"every health state", "c", []*model.Endpoint{
			ep("10.0.0.1", 80, east, model.Healthy), ep("10.0.0.2", 80, east, model.Unhealthy), ep("10.0.0.3", 80, east, model.Draining),
		}},
		{"duplicate addresses dropped, first wins", "c", []*model.Endpoint{
			ep("10.0.0.1", 80, east, model.Draining), ep("10.0.0.1", 80, west, model.Healthy), ep("10.0.0.1", 81, west, model.Healthy),
		}},
		{"duplicates past the linear scan limit", "c", append(many(40, 80), many(40, 80)...)},
		{"large ports and counts", "c", many(300, 65535)},
		{"long strings need multi-byte lengths", strings.Repeat("n", 200), []*model.Endpoint{
			ep(strings.Repeat("a", 130), 80, model.Locality{Region: strings.Repeat("r", 128), Zone: strings.Repeat("z", 300)}, model.Healthy),
		}},
		{"non-ASCII UTF-8", "clüster", []*model.Endpoint{ep("host-ä", 80, model.Locality{Region: "région"}, model.Healthy)}},
		{"auto mTLS: only istio-labelled endpoints carry the tlsMode match", "c", []*model.Endpoint{
			labelled(ep("10.0.0.1", 80, east, model.Healthy), model.TLSModeIstio),
			labelled(ep("10.0.0.2", 80, east, model.Draining), "disabled"),
			ep("10.0.0.3", 80, west, model.Healthy),
			labelled(ep("10.0.0.4", 80, west, model.Unhealthy), model.TLSModeIstio),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkAssignment(t, tt.cluster, tt.eps) })
	}
}

// TestRearrangedLayoutMatchesProto covers what locality-aware generators do
// to a layout: weights changed (to 0, or past one varint byte), groups
// dropped or split, priorities set, empty groups.
func TestRearrangedLayoutMatchesProto(t *testing.T) {
	eps := []*model.Endpoint{
		ep("10.0.0.1", 80, model.Locality{Region: "a", Zone: "a1"}, model.Healthy),
		ep("10.0.0.2", 80, model.Locality{Region: "a", Zone: "a1"}, model.Unhealthy),
		ep("10.0.0.3", 80, model.Locality{Region: "b"}, model.Draining),
		ep("10.0.0.4", 80, model.Locality{}, model.Healthy),
	}
	tests := []struct {
		name   string
		adjust func(l *Layout)
	}{
		{"as laid out", func(*Layout) {}},
		{"zero weight", func(l *Layout) { l.Groups[0].Weight = 0 }},
		{"large weight", func(l *Layout) { l.Groups[1].Weight = 1 << 31 }},
		{"priorities", func(l *Layout) {
			for i := range l.Groups {
				l.Groups[i].Priority = uint32(len(l.Groups) - i)
			}
			l.Groups[0].Priority = 300
		}},
		{"group dropped", func(l *Layout) { l.Groups = l.Groups[1:] }},
		{"no groups", func(l *Layout) { l.Groups = nil }},
		{"empty group", func(l *Layout) { l.Groups[2].Endpoints = nil }},
		{"group split", func(l *Layout) {
			g := l.Groups[1]
			first, second := g, g
			first.Endpoints, first.Weight = g.Endpoints[:1], 1
			second.Endpoints, second.Weight, second.Priority = g.Endpoints[1:], 1, 1
			l.Groups = append([]Group{first, second}, l.Groups[2:]...)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLayout("outbound|80||c", eps)
			tt.adjust(l)
			got, err := l.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if want := protoBytes(t, layoutMessage(l)); !bytes.Equal(got, want) {
				t.Errorf("encoding differs from proto.Marshal:\n got %x\nwant %x", got, want)
			}
		})
	}
}

// randomEndpoints draws endpoint sets meant to collide: few addresses,
// ports and localities, some unusable.
func randomEndpoints(r *rand.Rand) []*model.Endpoint {
	localities := []model.Locality{{}, {Region: "r1"}, {Region: "r1", Zone: "z1"}, {Region: "r1", Zone: "z2", SubZone: "s"},
		{Region: "r2", Zone: "z1"}, {Zone: "z1"}, {SubZone: "s"}}
	addresses := []string{"", "10.0.0.1", "10.0.0.2", "10.1.2.3", "fd00::1", "fd00::2", "2001:db8::ff00:42:8329", "host.example"}
	ports := []uint32{0, 80, 8080, 15001, 65535, 1 << 20}
	n := r.IntN(8)
	if r.IntN(4) == 0 {
		n = r.IntN(120) // past the linear dedup limit
	}
	eps := make([]*model.Endpoint, n)
	for i := range eps {
		addr := addresses[r.IntN(len(addresses))]
		if r.IntN(3) == 0 {
			addr = fmt.Sprintf("10.%d.%d.%d", r.IntN(3), r.IntN(256), r.IntN(256))
		}
		eps[i] = ep(addr, ports[r.IntN(len(ports))], localities[r.IntN(len(localities))], model.HealthStatus(r.IntN(3)))
		if r.IntN(2) == 0 {
			labelled(eps[i], model.TLSModeIstio)
		}
	}
	return eps
}

func TestRandomLoadAssignmentsMatchProto(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for i := range 500 {
		eps := randomEndpoints(r)
		name := fmt.Sprintf("outbound|%d||svc-%d.ns.svc.cluster.local", r.IntN(70000), i)
		checkAssignment(t, name, eps)

		// Rearrange the groups the way locality generators may.
		l := NewLayout(name, eps)
		r.Shuffle(len(l.Groups), func(a, b int) { l.Groups[a], l.Groups[b] = l.Groups[b], l.Groups[a] })
		for j := range l.Groups {
			g := &l.Groups[j]
			g.Priority = uint32(r.IntN(3)) * uint32(r.IntN(200))
			g.Weight = uint32(r.IntN(3)) * uint32(r.IntN(100000))
			r.Shuffle(len(g.Endpoints), func(a, b int) { g.Endpoints[a], g.Endpoints[b] = g.Endpoints[b], g.Endpoints[a] })
			g.Endpoints = g.Endpoints[:r.IntN(len(g.Endpoints)+1)]
		}
		got, err := l.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if want := protoBytes(t, layoutMessage(l)); !bytes.Equal(got, want) {
			t.Fatalf("case %d: rearranged encoding differs from proto.Marshal:\n got %x\nwant %x", i, got, want)
		}
		if t.Failed() {
			t.Fatalf("case %d: endpoints %v", i, eps)
		}
	}
}

// TestLoadAssignmentInvalidUTF8 holds the encoder to proto.Marshal's
// refusal of strings that are not UTF-8.
func TestLoadAssignmentInvalidUTF8(t *testing.T) {
	bad := "\xff\xfe"
	good := model.Locality{Region: "r"}
	tests := []struct {
		name    string
		cluster string
		eps     []*model.Endpoint
	}{
		{"cluster name", bad, nil},
		{"address", "c", []*model.Endpoint{ep(bad, 80, good, model.Healthy)}},
		{"region", "c", []*model.Endpoint{ep("10.0.0.1", 80, model.Locality{Region: bad}, model.Healthy)}},
		{"zone", "c", []*model.Endpoint{ep("10.0.0.1", 80, model.Locality{Zone: bad}, model.Healthy)}},
		{"sub-zone", "c", []*model.Endpoint{ep("10.0.0.1", 80, model.Locality{SubZone: bad}, model.Healthy)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := proto.Marshal(referenceAssignment(tt.cluster, tt.eps)); err == nil {
				t.Fatal("proto.Marshal accepted invalid UTF-8; the encoder's check is moot")
			}
			if _, err := buildLoadAssignment(tt.cluster, tt.eps); err == nil || !strings.Contains(err.Error(), "invalid UTF-8") {
				t.Errorf("buildLoadAssignment error = %v, want an invalid UTF-8 error", err)
			}
		})
	}
}

// TestLayoutDoesNotAliasInput checks that rearranging a layout leaves the
// caller's (shared, immutable) endpoint slice alone.
func TestLayoutDoesNotAliasInput(t *testing.T) {
	eps := []*model.Endpoint{
		ep("10.0.0.2", 80, model.Locality{Region: "b"}, model.Healthy),
		ep("10.0.0.1", 80, model.Locality{Region: "a"}, model.Healthy),
	}
	before := slices.Clone(eps)
	l := NewLayout("c", eps)
	for _, g := range l.Groups {
		g.Endpoints[0] = nil
	}
	if !slices.Equal(eps, before) {
		t.Errorf("layout writes reached the input slice")
	}
}

// BenchmarkBuildLoadAssignment measures one assignment of 10 endpoints in
// three zones (arriving unsorted), the typical cold EDS unit, all of pods
// with sidecars (so each carries the auto mTLS metadata). The vtproto and
// proto cases marshal the same message, built beforehand (so they measure
// less than a generator would pay), with go-control-plane's generated
// MarshalVTStrict or with proto.Marshal: the alternatives to the
// hand-written encoder. go-control-plane compiles its vtproto code only
// under the vtprotobuf build tag: run with -tags vtprotobuf to compare.
func BenchmarkBuildLoadAssignment(b *testing.B) {
	var eps []*model.Endpoint
	for j := range 10 {
		eps = append(eps, labelled(ep(fmt.Sprintf("10.1.2.%d", j), 17070, model.Locality{Region: "r1", Zone: fmt.Sprintf("z%d", j%3)}, model.Healthy), model.TLSModeIstio))
	}
	const name = "outbound|7070||svc-0001.default.svc.cluster.local"
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := buildLoadAssignment(name, eps); err != nil {
				b.Fatal(err)
			}
		}
	})
	msg := referenceAssignment(name, eps)
	b.Run("vtproto", func(b *testing.B) { benchmarkVTProto(b, msg) })
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := (proto.MarshalOptions{Deterministic: true}).Marshal(msg); err != nil {
				b.Fatal(err)
			}
		}
	})
}
