package hbone

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// A stream error (RFC 9113 §5.4.2) ends the stream, not just its frames:
// after its RST_STREAM the node hangs up on the destination, frees the
// stream's slot and sends nothing more on it, while the connection serves
// on.
func TestStreamErrorEndsTheStream(t *testing.T) {
	m := newMesh(t)
	dest := netip.MustParseAddrPort("127.0.0.1:9")
	cases := []struct {
		name string
		send func(c *rawClient) error // breaks stream 1
		want http2.ErrCode
	}{
		// §6.9: an increment of 0 is a PROTOCOL_ERROR.
		{name: "WINDOW_UPDATE of 0", want: http2.ErrCodeProtocol, send: func(c *rawClient) error {
			c.fr.AllowIllegalWrites = true
			return c.fr.WriteWindowUpdate(1, 0)
		}},
		// §8.2.1: an upper-case field name makes the message malformed.
		{name: "trailers with an upper-case name", want: http2.ErrCodeProtocol, send: func(c *rawClient) error {
			c.hbuf.Reset()
			c.enc.WriteField(hpack.HeaderField{Name: "X-Trailer", Value: "1"})
			return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.hbuf.Bytes(), EndStream: true, EndHeaders: true})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gate := make(dialGate)
			n := oneWorkloadNode(t, m, dest, nodeOpts{dial: gate.dial})
			c := dialRaw(t, m, n.at("127.0.0.2"))
			c.connect(1, dest)
			up := gate.next(t).connect(t)
			c.until(http2.FrameHeaders, 1)

			if err := tc.send(c); err != nil {
				t.Fatal(err)
			}
			if r := c.until(http2.FrameRSTStream, 1).(*http2.RSTStreamFrame); r.ErrCode != tc.want {
				t.Errorf("RST_STREAM %v, want %v", r.ErrCode, tc.want)
			}
			// The node closes the destination's connection before it
			// sends RST_STREAM, so this write finds it closed; were
			// the stream still relayed, it would be read and sent on.
			up.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := up.Write([]byte("late")); err == nil {
				t.Error("the destination is still connected")
			}
			for _, f := range c.sync() {
				if f.Header().StreamID == 1 {
					t.Errorf("%v after RST_STREAM", f.Header())
				}
			}
			hc := n.onlyConn(t)
			eventually(t, "the stream's slot to be freed", func() bool {
				hc.mu.Lock()
				defer hc.mu.Unlock()
				return len(hc.streams) == 0
			})
		})
	}
}
