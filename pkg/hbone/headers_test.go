package hbone

import (
	"bytes"
	"net/netip"
	"strings"
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

// A request whose field section exceeds the size the node advertises
// (SETTINGS_MAX_HEADER_LIST_SIZE, §6.5.2) is answered 431 (§10.5.1) and
// never dialled. Its field block is decoded to the end all the same, so
// the connection's HPACK state holds and its other streams relay on.
func TestHeaderListTooLarge(t *testing.T) {
	m := newMesh(t)
	dest := netip.MustParseAddrPort("127.0.0.1:9")
	tun := openTunnel(t, m, dest)
	c := tun.c
	if got := c.settings[http2.SettingMaxHeaderListSize]; got != maxHeaderListSize {
		t.Errorf("SETTINGS_MAX_HEADER_LIST_SIZE %d, want %d", got, maxHeaderListSize)
	}

	c.hbuf.Reset()
	c.enc.WriteField(hpack.HeaderField{Name: ":method", Value: "CONNECT"})
	c.enc.WriteField(hpack.HeaderField{Name: ":authority", Value: dest.String()})
	block := c.overLimit()
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	h := c.until(http2.FrameHeaders, 3).(*http2.MetaHeadersFrame)
	if got := h.PseudoValue("status"); got != "431" {
		t.Errorf("status %s, want 431", got)
	}
	if got := tun.n.dials.Load(); got != 1 {
		t.Errorf("%d dials, want only stream 1's", got)
	}
	tun.relays(t)
	// Sent again, the big field is a reference to the dynamic table
	// entry the refused request made: this stream opens only if the
	// node decoded that request to the end.
	c.connect(5, dest, bigField)
	tun.gate.next(t).connect(t)
	c.until(http2.FrameHeaders, 5)
	if got := tun.n.counters.Refusals(Inbound, ReasonHeaders); got != 1 {
		t.Errorf("%d refusals for %q, want 1", got, ReasonHeaders)
	}
}

// bigField fits in HPACK's default dynamic table (4096 bytes) beside a
// CONNECT's fields, so that all stay in it to be referred to.
var bigField = hpack.HeaderField{Name: "x-big", Value: strings.Repeat("a", 3000)}

// overLimit adds to the field block being encoded fields that decode to
// more than maxHeaderListSize bytes in a few KiB (bigField, then references
// to it in the dynamic table), and returns the block.
func (c *rawClient) overLimit() []byte {
	for range maxHeaderListSize/bigField.Size() + 1 {
		c.enc.WriteField(bigField)
	}
	return c.hbuf.Bytes()
}

// A HEADERS frame the node cannot decode to the end is a connection error:
// the HPACK state it shares with the source would be left behind the
// source's (RFC 9113 §4.3), so no later field block could be trusted. The
// node sends GOAWAY with the code the RFC gives and closes the connection.
func TestHeadersThatCannotBeDecodedEndTheConnection(t *testing.T) {
	m := newMesh(t)
	dest := netip.MustParseAddrPort("127.0.0.1:9")
	cases := []struct {
		name string
		send func(c *rawClient) error // on stream 3
		want http2.ErrCode
	}{
		// §4.2: a frame carrying a field block that is larger than
		// SETTINGS_MAX_FRAME_SIZE is a connection error.
		{name: "larger than SETTINGS_MAX_FRAME_SIZE", want: http2.ErrCodeFrameSize, send: func(c *rawClient) error {
			block := bytes.Repeat([]byte{0x82}, readFrameSize+1) // :method GET, over and over
			// The node reads no further than the frame's header, and
			// may close the connection before the rest is written.
			c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block, EndHeaders: true})
			return nil
		}},
		// §6.2: padding as long as the payload is a connection error.
		{name: "padded past its end", want: http2.ErrCodeProtocol, send: func(c *rawClient) error {
			return c.fr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersPadded|http2.FlagHeadersEndHeaders, 3, []byte{5, 0x82})
		}},
		// §4.3: a field block that does not decode is a COMPRESSION_ERROR.
		{name: "not HPACK", want: http2.ErrCodeCompression, send: func(c *rawClient) error {
			return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: []byte{0x80}, EndHeaders: true}) // index 0
		}},
		// Past the limit the framer stops decoding, so a field block
		// that goes on in CONTINUATION frames cannot be followed.
		{name: "over the size limit, continued", want: http2.ErrCodeProtocol, send: func(c *rawClient) error {
			c.hbuf.Reset()
			if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: c.overLimit()}); err != nil {
				return err
			}
			return c.fr.WriteContinuation(3, true, []byte{0x82})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := openTunnel(t, m, dest).c

			if err := tc.send(c); err != nil {
				t.Fatal(err)
			}
			c.goneAway(tc.want)
		})
	}
}
