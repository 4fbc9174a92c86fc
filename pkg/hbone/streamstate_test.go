package hbone

import (
	"io"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The node keeps to the stream states of RFC 9113 §5.1. Stream 1 is an open
// tunnel throughout; each case puts stream 5 in a state (before), then sends
// one frame. A frame a state forbids is a connection error: GOAWAY with
// PROTOCOL_ERROR, then the node closes the connection. A frame it allows
// leaves the connection serving: stream 7 still opens.
func TestStreamStates(t *testing.T) {
	m := newMesh(t)
	dest := netip.MustParseAddrPort("127.0.0.1:9")
	upper := hpack.HeaderField{Name: "X-Upper", Value: "1"} // malformed, §8.2.1
	// refused5 sends HEADERS on stream 5 that the node refuses as
	// malformed.
	refused5 := func(c *rawClient, _ *node, _ dialGate) {
		c.connect(5, dest, upper)
		if r := c.until(http2.FrameRSTStream, 5).(*http2.RSTStreamFrame); r.ErrCode != http2.ErrCodeProtocol {
			c.t.Fatalf("malformed HEADERS answered with RST_STREAM %v, want %v", r.ErrCode, http2.ErrCodeProtocol)
		}
	}
	// closed5 opens stream 5, which the node ends (its dial fails) and
	// forgets.
	closed5 := func(c *rawClient, n *node, gate dialGate) {
		c.connect(5, dest)
		gate.next(c.t).fail()
		c.until(http2.FrameRSTStream, 5) // after the 503 response
		forgotten5(c.t, n)
	}
	// cleanly5 opens stream 5 and ends it both ways, with no reset.
	cleanly5 := func(c *rawClient, n *node, gate dialGate) {
		c.connect(5, dest)
		up := gate.next(c.t).connectTCP(c.t)
		c.until(http2.FrameHeaders, 5)
		if err := c.fr.WriteData(5, true, nil); err != nil {
			c.t.Fatal(err)
		}
		up.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := up.Read(make([]byte, 1)); err != io.EOF {
			c.t.Fatalf("the destination read %v, want EOF", err)
		}
		up.Close()
		for !c.until(http2.FrameData, 5).(*http2.DataFrame).StreamEnded() {
		}
		forgotten5(c.t, n)
	}
	// sourceReset5 opens stream 5, which the source resets: the node
	// sends no RST_STREAM of its own.
	sourceReset5 := func(c *rawClient, n *node, gate dialGate) {
		c.connect(5, dest)
		gate.next(c.t).connect(c.t)
		c.until(http2.FrameHeaders, 5)
		if err := c.fr.WriteRSTStream(5, http2.ErrCodeCancel); err != nil {
			c.t.Fatal(err)
		}
		forgotten5(c.t, n)
	}
	headers := func(id uint32, extra ...hpack.HeaderField) func(c *rawClient) error {
		return func(c *rawClient) error { c.connect(id, dest, extra...); return nil }
	}
	rst := func(id uint32) func(c *rawClient) error {
		return func(c *rawClient) error { return c.fr.WriteRSTStream(id, http2.ErrCodeCancel) }
	}
	windowUpdate := func(id, inc uint32) func(c *rawClient) error {
		return func(c *rawClient) error {
			c.fr.AllowIllegalWrites = inc == 0 // §6.9: a stream error, were the stream open
			return c.fr.WriteWindowUpdate(id, inc)
		}
	}
	data := func(c *rawClient) error { c.send(5, []byte("x")); return nil }
	cases := []struct {
		name   string
		before func(c *rawClient, n *node, gate dialGate) // nil leaves stream 5 idle
		send   func(c *rawClient) error
		goAway bool
		// reset is whether the node answers with RST_STREAM on stream 5
		// (STREAM_CLOSED): for frames on a stream the source closed or
		// reset, not for those that crossed the node's own reset.
		reset bool
	}{
		// §5.1: on an idle stream only HEADERS and PRIORITY may come;
		// anything else is a connection error.
		{name: "idle, WINDOW_UPDATE", send: windowUpdate(5, 1), goAway: true},
		{name: "idle, WINDOW_UPDATE of 0", send: windowUpdate(5, 0), goAway: true},
		{name: "idle, DATA", send: data, goAway: true},
		{name: "idle, RST_STREAM", send: rst(5), goAway: true},
		{name: "idle, PRIORITY", send: func(c *rawClient) error {
			return c.fr.WritePriority(5, http2.PriorityParam{StreamDep: 1, Weight: 15})
		}},
		// §5.1.1: the first use of a stream ID closes the lower idle
		// IDs, and opening one of those is an unexpected ID.
		{name: "refused, HEADERS on a lower ID", before: refused5, send: headers(3), goAway: true},
		// §5.1: frames the source sent before it saw the node's
		// RST_STREAM are discarded, HEADERS among them (decoded all
		// the same, the HPACK state being the connection's).
		{name: "refused, HEADERS again", before: refused5, send: headers(5)},
		{name: "refused, malformed HEADERS again", before: refused5, send: headers(5, upper)},
		// §5.1: the stream is closed, not idle; the source may send these
		// before it has read the node's RST_STREAM or END_STREAM.
		{name: "refused, RST_STREAM", before: refused5, send: rst(5)},
		{name: "refused, WINDOW_UPDATE", before: refused5, send: windowUpdate(5, 1)},
		{name: "refused, DATA", before: refused5, send: data},
		{name: "closed, DATA", before: closed5, send: data},
		{name: "closed, RST_STREAM", before: closed5, send: rst(5)},
		{name: "closed, WINDOW_UPDATE", before: closed5, send: windowUpdate(5, 1)},
		{name: "closed, HEADERS again", before: closed5, send: headers(5)},
		// Nothing of the source's can be in flight on a stream it ended
		// or reset itself: HEADERS there reuse a stream ID.
		{name: "closed cleanly, HEADERS again", before: cleanly5, send: headers(5), goAway: true},
		{name: "reset by the source, HEADERS again", before: sourceReset5, send: headers(5), goAway: true},
		// DATA there is a stream error (§5.1, "half-closed (remote)"
		// and "closed").
		{name: "closed cleanly, DATA", before: cleanly5, send: data, reset: true},
		{name: "reset by the source, DATA", before: sourceReset5, send: data, reset: true},
		// Even IDs are the server's, and the node opens none: stream 4
		// is idle though below stream 5 (§5.1.1 closes only the lower
		// IDs of the side that opened 5).
		{name: "closed, RST_STREAM on the server's stream 4", before: closed5, send: rst(4), goAway: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tun := openTunnel(t, m, dest)
			n, gate, c := tun.n, tun.gate, tun.c
			if tc.before != nil {
				tc.before(c, n, gate)
			}

			if err := tc.send(c); err != nil {
				t.Fatal(err)
			}
			if tc.goAway {
				c.goneAway(http2.ErrCodeProtocol)
				return
			}
			reset := false
			for _, f := range c.sync() {
				switch f := f.(type) {
				case *http2.GoAwayFrame:
					t.Fatalf("GOAWAY %v, want the connection to serve on", f.ErrCode)
				case *http2.RSTStreamFrame:
					if f.StreamID == 5 {
						if !tc.reset || f.ErrCode != http2.ErrCodeStreamClosed {
							t.Errorf("RST_STREAM %v on stream 5, want reset=%v with %v", f.ErrCode, tc.reset, http2.ErrCodeStreamClosed)
						}
						reset = true
					}
				}
			}
			if tc.reset && !reset {
				t.Errorf("no RST_STREAM on stream 5, want %v", http2.ErrCodeStreamClosed)
			}
			c.connect(7, dest)
			gate.next(t).connect(t)
			c.until(http2.FrameHeaders, 7)
		})
	}
}

// forgotten5 waits until the node no longer tracks stream 5.
func forgotten5(t *testing.T, n *node) {
	t.Helper()
	hc := n.onlyConn(t)
	eventually(t, "stream 5 to be forgotten", func() bool {
		hc.mu.Lock()
		defer hc.mu.Unlock()
		return hc.streams[5] == nil
	})
}
