package hbone

import (
	"net/netip"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// HEADERS the source sent on a stream before it saw the node's RST_STREAM
// are discarded without an answer (RFC 9113 §5.1), but their field block is
// still decoded: each case's HEADERS add a field to the HPACK dynamic
// table, and stream 7 then opens only if the node's table kept up, as its
// request names that field by its index there.
func TestHeadersOnAStreamTheNodeResetAreDiscarded(t *testing.T) {
	m := newMesh(t)
	dest := nowhere
	seen := hpack.HeaderField{Name: "x-seen", Value: "only in the discarded HEADERS"}
	cases := []struct {
		name  string
		reset func(c *rawClient, gate dialGate) // has the node reset stream 5
		send  func(c *rawClient) error          // HEADERS on stream 5, with seen
	}{
		{name: "malformed request, HEADERS again", reset: malformed5, send: headers5(false, seen)},
		{name: "malformed request, trailers", reset: malformed5, send: headers5(true, seen)},
		{name: "malformed request, malformed HEADERS", reset: malformed5,
			send: headers5(false, seen, hpack.HeaderField{Name: "X-Upper", Value: "1"})},
		{name: "stream error, HEADERS again", reset: streamError5, send: headers5(false, seen)},
		{name: "dial failed, trailers", reset: dialFailed5, send: headers5(true, seen)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tun := openTunnel(t, m, dest)
			c := tun.c
			tc.reset(c, tun.gate)
			forgotten5(t, tun.n)

			if err := tc.send(c); err != nil {
				t.Fatal(err)
			}
			for _, f := range c.sync() {
				if f.Header().StreamID == 5 {
					t.Errorf("%v, want the HEADERS discarded", f.Header())
				}
				if g, ok := f.(*http2.GoAwayFrame); ok {
					t.Fatalf("GOAWAY %v, want the HEADERS discarded", g.ErrCode)
				}
			}
			c.connect(7, dest, seen)
			tun.gate.next(t).connect(t)
			c.until(http2.FrameHeaders, 7)
			tun.relays(t)
		})
	}
}

// The node remembers the streams it reset only for its last
// 2×MaxConcurrentStreams resets: past that, HEADERS on one of them are
// taken for a reused stream ID (RFC 9113 §5.1.1), a connection error.
func TestResetStreamsAreRememberedBounded(t *testing.T) {
	m := newMesh(t)
	dest := nowhere
	tun := openTunnel(t, m, dest)
	c := tun.c
	// Twice the server's default MaxConcurrentStreams.
	const remembered = 2 * 100
	upper := hpack.HeaderField{Name: "X-Upper", Value: "1"} // malformed, §8.2.1
	// remembered+1 streams, each reset as malformed.
	first, last := uint32(3), uint32(3+2*remembered)
	for id := first; id <= last; id += 2 {
		c.connect(id, dest, upper)
	}
	c.sync()

	// The oldest reset still remembered: discarded.
	c.connect(first+2, dest)
	for _, f := range c.sync() {
		if f.Header().StreamID == first+2 || f.Header().Type == http2.FrameGoAway {
			t.Fatalf("%v, want the HEADERS discarded", f.Header())
		}
	}
	// The one before it, forgotten.
	c.connect(first, dest)
	c.goneAway(http2.ErrCodeProtocol)
}

// malformed5 sends a request on stream 5 that the node refuses as
// malformed (§8.2.2), with RST_STREAM.
func malformed5(c *rawClient, _ dialGate) {
	c.connect(5, nowhere, hpack.HeaderField{Name: "connection", Value: "close"})
	c.resetAlone(5, http2.ErrCodeProtocol)
}

// streamError5 opens stream 5, then breaks it (a WINDOW_UPDATE of 0,
// §6.9): the node resets it.
func streamError5(c *rawClient, gate dialGate) {
	c.connect(5, nowhere)
	gate.next(c.t).connect(c.t)
	c.until(http2.FrameHeaders, 5)
	c.fr.AllowIllegalWrites = true
	defer func() { c.fr.AllowIllegalWrites = false }()
	if err := c.fr.WriteWindowUpdate(5, 0); err != nil {
		c.t.Fatal(err)
	}
	c.until(http2.FrameRSTStream, 5)
}

// dialFailed5 opens stream 5, whose dial fails: the node answers 503 and
// resets the request side it never read to the end.
func dialFailed5(c *rawClient, gate dialGate) {
	c.connect(5, nowhere)
	gate.next(c.t).fail()
	c.until(http2.FrameRSTStream, 5)
}

// headers5 sends HEADERS on stream 5 with fields, ending the stream if end.
func headers5(end bool, fields ...hpack.HeaderField) func(c *rawClient) error {
	return func(c *rawClient) error {
		c.hbuf.Reset()
		for _, f := range append([]hpack.HeaderField{
			{Name: ":method", Value: "CONNECT"},
			{Name: ":authority", Value: nowhere.String()},
		}, fields...) {
			c.enc.WriteField(f)
		}
		return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: c.hbuf.Bytes(), EndStream: end, EndHeaders: true})
	}
}

// nowhere is the destination these tests name; nothing listens there.
var nowhere = netip.MustParseAddrPort("127.0.0.1:9")
