package hbone

import (
	"net/netip"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// A request whose pseudo-header fields break RFC 9113 §8.3.1 or §8.5 is
// malformed (§8.1.1), a stream error: the node resets that stream with
// PROTOCOL_ERROR and nothing else, answers no status, dials nothing, and
// the connection's other streams relay on.
func TestMalformedRequestIsAStreamError(t *testing.T) {
	m := newMesh(t)
	dest := netip.MustParseAddrPort("127.0.0.1:9")
	field := func(name, value string) hpack.HeaderField { return hpack.HeaderField{Name: name, Value: value} }
	connect := field(":method", "CONNECT")
	authority := field(":authority", dest.String())
	cases := []struct {
		name   string
		fields []hpack.HeaderField
	}{
		{name: "no :method", fields: []hpack.HeaderField{authority}},
		{name: "CONNECT without :authority", fields: []hpack.HeaderField{connect}},
		// host is no stand-in for :authority in a CONNECT (§8.5).
		{name: "CONNECT with host instead of :authority", fields: []hpack.HeaderField{connect, field("host", dest.String())}},
		{name: "CONNECT with an empty :authority", fields: []hpack.HeaderField{connect, field(":authority", "")}},
		{name: "CONNECT with :scheme", fields: []hpack.HeaderField{connect, authority, field(":scheme", "https")}},
		{name: "CONNECT with :path", fields: []hpack.HeaderField{connect, authority, field(":path", "/")}},
		// The node never offers extended CONNECT (RFC 8441
		// SETTINGS_ENABLE_CONNECT_PROTOCOL), so :protocol is a pseudo-header
		// field it does not know (§8.3).
		{name: "CONNECT with :protocol", fields: []hpack.HeaderField{connect, authority, field(":protocol", "websocket")}},
		{name: "GET without :scheme and :path", fields: []hpack.HeaderField{field(":method", "GET"), authority}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tun := openTunnel(t, m, dest)
			tun.c.request(3, tc.fields...)
			tun.c.resetAlone(3, http2.ErrCodeProtocol)
			tun.relays(t)
			if got := tun.n.dials.Load(); got != 1 {
				t.Errorf("%d dials, want only stream 1's", got)
			}
		})
	}
}
