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
		// §8.2.2: connection-specific fields make a message malformed,
		// and te may say only "trailers".
		{name: "connection", fields: []hpack.HeaderField{connect, authority, field("connection", "keep-alive")}},
		{name: "keep-alive", fields: []hpack.HeaderField{connect, authority, field("keep-alive", "timeout=5")}},
		{name: "proxy-connection", fields: []hpack.HeaderField{connect, authority, field("proxy-connection", "keep-alive")}},
		{name: "transfer-encoding", fields: []hpack.HeaderField{connect, authority, field("transfer-encoding", "chunked")}},
		{name: "upgrade", fields: []hpack.HeaderField{connect, authority, field("upgrade", "websocket")}},
		{name: "te other than trailers", fields: []hpack.HeaderField{connect, authority, field("te", "gzip")}},
		{name: "te trailers among others", fields: []hpack.HeaderField{connect, authority, field("te", "trailers, gzip")}},
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

// te: trailers is the one connection-specific field a request may carry
// (RFC 9113 §8.2.2), and does not stop a CONNECT.
func TestTETrailersIsAllowed(t *testing.T) {
	m := newMesh(t)
	dest := netip.MustParseAddrPort("127.0.0.1:9")
	tun := openTunnel(t, m, dest)
	tun.c.connect(3, dest, hpack.HeaderField{Name: "te", Value: "trailers"})
	tun.gate.next(t).connect(t)
	if h := tun.c.until(http2.FrameHeaders, 3).(*http2.MetaHeadersFrame); h.PseudoValue("status") != "200" {
		t.Errorf("status %s, want 200", h.PseudoValue("status"))
	}
}
