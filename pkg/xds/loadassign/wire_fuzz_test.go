package loadassign

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// fuzzBytes hands out the fuzzer's bytes one decision at a time; once they
// run out every decision is zero, so any input describes a whole case.
type fuzzBytes []byte

func (b *fuzzBytes) next() byte {
	if len(*b) == 0 {
		return 0
	}
	c := (*b)[0]
	*b = (*b)[1:]
	return c
}

func (b *fuzzBytes) uint32() uint32 {
	var v [4]byte
	for i := range v {
		v[i] = b.next()
	}
	return binary.LittleEndian.Uint32(v[:])
}

// fuzzEndpoints draws endpoints from the fuzzer's bytes: addresses, ports
// and localities mostly from small pools, so that duplicates and shared
// localities are common, and sometimes the fuzzer's own strings, which may
// be long or not UTF-8.
func fuzzEndpoints(spec *fuzzBytes, addr, region string) []*model.Endpoint {
	// The reference layout sorts localities by their parts joined with NUL
	// bytes, an order that differs from the layout's part-by-part one only
	// for parts that hold NUL (which Kubernetes labels cannot); such
	// localities would test the oracle, not the encoder.
	region = strings.ReplaceAll(region, "\x00", "")
	addresses := []string{"", "10.0.0.1", "10.0.0.2", "fd00::1", "host.example", addr}
	localities := []model.Locality{{}, {Region: "r1"}, {Region: "r1", Zone: "z1"}, {Region: "r1", Zone: "z1", SubZone: "s"},
		{Zone: "z1"}, {Region: region}, {Region: region, Zone: region, SubZone: region}}
	n := int(spec.next())
	eps := make([]*model.Endpoint, 0, n)
	for range n {
		e := &model.Endpoint{
			Address:  addresses[int(spec.next())%len(addresses)],
			Locality: localities[int(spec.next())%len(localities)],
		}
		switch p := spec.next(); p % 4 {
		case 0:
			e.Port = 0 // unusable
		case 1:
			e.Port = 80
		case 2:
			e.Port = 65535
		default:
			e.Port = spec.uint32()
		}
		flags := spec.next()
		e.Health = model.HealthStatus(flags % 3)
		if flags&0x80 != 0 {
			e.Labels, e.MTLS = map[string]string{model.TLSModeLabel: model.TLSModeIstio}, true
		} else if flags&0x40 != 0 {
			e.Labels = map[string]string{model.TLSModeLabel: "disabled"}
		}
		eps = append(eps, e)
	}
	return eps
}

// FuzzLoadAssignmentMatchesProto holds the hand-written encoder to its
// contract: for any endpoints, the bytes deterministic proto.Marshal gives
// for the reference message (laid out independently in wire_test.go), an
// exactly sized buffer, and an error exactly when proto.Marshal refuses
// (strings that are not UTF-8). It then rearranges the layout as the
// locality generators do (groups reordered, dropped, split, reweighted,
// reprioritised) and checks the same against the layout's message.
func FuzzLoadAssignmentMatchesProto(f *testing.F) {
	f.Add("outbound|80||web.app.svc.cluster.local", "10.9.9.9", "us-east", []byte{3, 1, 2, 1, 0x80, 2, 3, 2, 0, 1, 1, 1, 3, 0, 0, 0, 1, 2})
	f.Add("", "", "", []byte{})
	f.Add("c", "fd00::9", "eu", []byte{6, 5, 5, 3, 0xff, 0xff, 0, 0, 1, 1, 1, 2, 0x41, 0, 6, 2, 0x82, 5, 6, 1, 0, 3, 0, 1, 0x80, 2, 2, 200, 0, 7, 1})
	f.Add("clüster", "\xff\xfe", "région", []byte{2, 5, 5, 1, 0, 1, 6, 1, 1})
	f.Add("outbound|7070|v1|echo.demo.svc.cluster.local", "10.0.0.1", "r1", bytes.Repeat([]byte{1, 3, 1, 0x80}, 50))
	f.Fuzz(func(t *testing.T, name, addr, region string, spec []byte) {
		in := fuzzBytes(spec)
		eps := fuzzEndpoints(&in, addr, region)

		_, refErr := proto.MarshalOptions{Deterministic: true}.Marshal(referenceAssignment(name, eps))
		res, err := buildLoadAssignment(name, eps)
		if (err != nil) != (refErr != nil) {
			t.Fatalf("encoder error %v, proto.Marshal error %v", err, refErr)
		}
		if err != nil {
			return
		}
		checkAssignment(t, name, eps)
		// What the encoder wrote decodes to the reference message.
		var decoded endpoint.ClusterLoadAssignment
		if err := proto.Unmarshal(res.Resource.GetValue(), &decoded); err != nil {
			t.Fatalf("encoded assignment does not decode: %v", err)
		}
		if want := referenceAssignment(name, eps); !proto.Equal(&decoded, want) {
			t.Fatalf("decoded assignment differs:\n got %v\nwant %v", &decoded, want)
		}

		l := NewLayout(name, eps)
		groups := make([]Group, 0, len(l.Groups))
		for _, g := range l.Groups {
			switch in.next() % 4 {
			case 0: // dropped
				continue
			case 1: // split in two, the second at another priority
				if len(g.Endpoints) > 1 {
					cut := 1 + int(in.next())%(len(g.Endpoints)-1)
					first, second := g, g
					first.Endpoints, second.Endpoints = g.Endpoints[:cut], g.Endpoints[cut:]
					second.Priority = uint32(in.next())
					groups = append(groups, first, second)
					continue
				}
			case 2:
				g.Weight = in.uint32()
				g.Priority = uint32(in.next())
			}
			groups = append(groups, g)
		}
		if len(groups) > 1 {
			i, j := int(in.next())%len(groups), int(in.next())%len(groups)
			groups[i], groups[j] = groups[j], groups[i]
		}
		l.Groups = groups
		got, err := l.Marshal()
		if err != nil {
			t.Fatalf("rearranged layout: %v", err)
		}
		if want := protoBytes(t, layoutMessage(l)); !bytes.Equal(got, want) {
			t.Fatalf("rearranged encoding differs from proto.Marshal:\n got %x\nwant %x", got, want)
		}
	})
}
