package hbone

import (
	"net/netip"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// HEADERS on a stream already open breaks that stream alone (RFC 9113
// §5.4.2): the node resets it and the connection's other streams relay on.
// A CONNECT stream carries nothing but DATA and stream management frames
// after its request's HEADERS (§8.5), so there is no trailer section to
// accept; once the source has ended the stream, it is half-closed (remote)
// and anything more is STREAM_CLOSED (§5.1).
func TestHeadersOnAnOpenStreamResetIt(t *testing.T) {
	m := newMesh(t)
	dest := netip.MustParseAddrPort("127.0.0.1:9")
	cases := []struct {
		name  string
		ended bool // the source has sent END_STREAM on stream 3 first
		end   bool // the HEADERS carry END_STREAM
		want  http2.ErrCode
	}{
		{name: "HEADERS without END_STREAM", want: http2.ErrCodeProtocol},
		{name: "trailers", end: true, want: http2.ErrCodeProtocol},
		{name: "HEADERS after END_STREAM", ended: true, end: true, want: http2.ErrCodeStreamClosed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tun := openTunnel(t, m, dest)
			c := tun.c
			c.connect(3, dest)
			// Half-closed (remote), stream 3 lives on until its
			// destination ends too: over a pipe the node would
			// close it whole and forget the stream.
			tun.gate.next(t).connectTCP(t)
			c.until(http2.FrameHeaders, 3)
			if tc.ended {
				if err := c.fr.WriteData(3, true, nil); err != nil {
					t.Fatal(err)
				}
			}

			c.hbuf.Reset()
			c.enc.WriteField(hpack.HeaderField{Name: "x-trailer", Value: "1"})
			if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: c.hbuf.Bytes(), EndStream: tc.end, EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
			c.resetAlone(3, tc.want)
			tun.relays(t)
		})
	}
}
