package envoygen

import (
	"bytes"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
)

// TestAutoMTLSMatchesWire: the hand-written matches are, byte for byte,
// what proto.Marshal writes for the messages autoMTLSMatches builds, for
// every kind of identity, with and without HTTP/2, and at lengths whose
// varints take more than one byte.
func TestAutoMTLSMatchesWire(t *testing.T) {
	long := "outbound_.8080_._." + strings.Repeat("a", 300) + ".default.svc.cluster.local"
	manySANs := make([]string, 40)
	for i := range manySANs {
		manySANs[i] = "spiffe://cluster.local/ns/default/sa/account-" + strings.Repeat("x", i)
	}
	for _, tc := range []struct {
		name string
		sans []string
		sni  string
	}{
		{"no identities", nil, "outbound_.80_._.web.default.svc.cluster.local"},
		{"one SPIFFE ID", []string{"spiffe://cluster.local/ns/default/sa/web"}, "outbound_.80_._.web.default.svc.cluster.local"},
		{"DNS and IP names", []string{"web.example.com", "10.0.0.1", "2001:db8::1"}, "outbound_.443_._.web.default.svc.cluster.local"},
		{"a long SNI", []string{"spiffe://cluster.local/ns/default/sa/web"}, long},
		{"many identities", manySANs, long},
		{"no SNI", []string{"spiffe://cluster.local/ns/default/sa/web"}, ""},
	} {
		for _, h2 := range []bool{false, true} {
			want := marshalDeterministic(&cluster.Cluster{TransportSocketMatches: autoMTLSMatches(istioMutualContext(tc.sans, tc.sni, h2))})
			got := encodeAutoMTLSMatches(t, []byte("prefix"), tc.sans, tc.sni, h2)
			if !bytes.HasPrefix(got, []byte("prefix")) || !bytes.Equal(got[len("prefix"):], want) {
				t.Errorf("%s, h2 %v: %d bytes written, proto.Marshal writes %d:\n got %x\nwant %x", tc.name, h2, len(got)-len("prefix"), len(want), got[len("prefix"):], want)
			}
		}
	}
}

// encodeAutoMTLSMatches appends the matches to prefix, and checks that they
// took the size their layout promised, which the cluster is allocated by.
func encodeAutoMTLSMatches(t *testing.T, prefix []byte, sans []string, sni string, h2 bool) []byte {
	t.Helper()
	l := layoutAutoMTLSMatches(sans, sni, h2)
	got := appendAutoMTLSMatches(prefix, &l)
	if n := len(got) - len(prefix); n != l.size() {
		t.Errorf("sni %q sans %q h2 %v: %d bytes written, %d laid out", sni, sans, h2, n, l.size())
	}
	return got
}

// FuzzAutoMTLSMatchesWire: the same for any SNI and identities (UTF-8, as
// every name the generators pass is; see utf8Only).
func FuzzAutoMTLSMatchesWire(f *testing.F) {
	f.Add("outbound_.80_._.web.default.svc.cluster.local", "spiffe://cluster.local/ns/default/sa/web", "10.1.2.3", uint8(2), true)
	f.Add("", "", "", uint8(0), false)
	f.Add("", "", "x", uint8(2), false) // an empty SAN is still a set oneof
	f.Fuzz(func(t *testing.T, sni, san1, san2 string, count uint8, h2 bool) {
		sni = utf8Only(sni)
		sans := []string{utf8Only(san1), utf8Only(san2)}[:count%3]
		want := marshalDeterministic(&cluster.Cluster{TransportSocketMatches: autoMTLSMatches(istioMutualContext(sans, sni, h2))})
		if got := encodeAutoMTLSMatches(t, nil, sans, sni, h2); !bytes.Equal(got, want) {
			t.Errorf("sni %q sans %q h2 %v:\n got %x\nwant %x", sni, sans, h2, got, want)
		}
	})
}
