package hbone

import (
	"net/netip"
	"testing"

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
	// refused5 sends HEADERS on stream 5 that the node refuses as
	// malformed (§8.2.1: an upper-case field name).
	refused5 := func(t *testing.T, c *rawClient, _ dialGate) {
		c.connect(5, dest, hpack.HeaderField{Name: "X-Upper", Value: "1"})
		if r := c.until(http2.FrameRSTStream, 5).(*http2.RSTStreamFrame); r.ErrCode != http2.ErrCodeProtocol {
			t.Fatalf("malformed HEADERS answered with RST_STREAM %v, want %v", r.ErrCode, http2.ErrCodeProtocol)
		}
	}
	connect := func(id uint32) func(c *rawClient) error {
		return func(c *rawClient) error { c.connect(id, dest); return nil }
	}
	cases := []struct {
		name   string
		before func(t *testing.T, c *rawClient, gate dialGate) // nil leaves stream 5 idle
		send   func(c *rawClient) error
		goAway bool
	}{
		// §5.1.1: a stream ID is used once, even by HEADERS the node
		// refused, and its first use closes the lower idle IDs.
		{name: "refused, HEADERS again", before: refused5, send: connect(5), goAway: true},
		{name: "refused, HEADERS on a lower ID", before: refused5, send: connect(3), goAway: true},
		{name: "refused, malformed HEADERS again", before: refused5, goAway: true, send: func(c *rawClient) error {
			c.connect(5, dest, hpack.HeaderField{Name: "X-Upper", Value: "1"})
			return nil
		}},
		// §5.1: the stream is closed, not idle. The source may not have
		// read the node's RST_STREAM yet when it sends these.
		{name: "refused, RST_STREAM", before: refused5, send: func(c *rawClient) error {
			return c.fr.WriteRSTStream(5, http2.ErrCodeCancel)
		}},
		{name: "refused, WINDOW_UPDATE", before: refused5, send: func(c *rawClient) error {
			return c.fr.WriteWindowUpdate(5, 1)
		}},
		{name: "refused, DATA", before: refused5, send: func(c *rawClient) error {
			c.send(5, []byte("x"))
			return nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gate := make(dialGate)
			n := oneWorkloadNode(t, m, dest, nodeOpts{dial: gate.dial})
			c := dialRaw(t, m, n.at("127.0.0.2"))
			c.connect(1, dest)
			gate.next(t).connect(t)
			c.until(http2.FrameHeaders, 1)
			if tc.before != nil {
				tc.before(t, c, gate)
			}

			if err := tc.send(c); err != nil {
				t.Fatal(err)
			}
			if tc.goAway {
				c.goneAway(http2.ErrCodeProtocol)
				return
			}
			for _, f := range c.sync() {
				if g, ok := f.(*http2.GoAwayFrame); ok {
					t.Fatalf("GOAWAY %v, want the connection to serve on", g.ErrCode)
				}
			}
			c.connect(7, dest)
			gate.next(t).connect(t)
			c.until(http2.FrameHeaders, 7)
		})
	}
}
