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
		// §6.9.1: a stream's window may not exceed 2^31-1.
		{name: "WINDOW_UPDATE past 2^31-1", want: http2.ErrCodeFlowControl, send: func(c *rawClient) error {
			return c.fr.WriteWindowUpdate(1, 1<<31-1)
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
			tun := openTunnel(t, m, dest)
			n, c, up := tun.n, tun.c, tun.up

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

// A window past 2^31-1 is a connection error when it is the connection's
// (RFC 9113 §6.9.1), or a stream's through a new SETTINGS_INITIAL_WINDOW_SIZE
// (§6.9.2): the node sends GOAWAY with FLOW_CONTROL_ERROR.
func TestWindowOverflowEndsTheConnection(t *testing.T) {
	m := newMesh(t)
	dest := netip.MustParseAddrPort("127.0.0.1:9")
	cases := []struct {
		name string
		send func(c *rawClient) error // with stream 1 open, at the initial 65535
	}{
		{name: "connection WINDOW_UPDATE", send: func(c *rawClient) error {
			return c.fr.WriteWindowUpdate(0, 1<<31-1)
		}},
		{name: "SETTINGS_INITIAL_WINDOW_SIZE", send: func(c *rawClient) error {
			// Stream 1's window at the limit, then one more.
			if err := c.fr.WriteWindowUpdate(1, 1<<31-1-65535); err != nil {
				return err
			}
			return c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535 + 1})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := openTunnel(t, m, dest).c

			if err := tc.send(c); err != nil {
				t.Fatal(err)
			}
			c.goneAway(http2.ErrCodeFlowControl)
		})
	}
}
