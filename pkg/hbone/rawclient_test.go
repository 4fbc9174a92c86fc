package hbone

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawClient is an HTTP/2 client written frame by frame, for what a
// well-behaved client never does: keep a stream open past a deadline, or
// stop reading. It has sent the preface and settings, and acknowledged the
// server's.
type rawClient struct {
	t    *testing.T
	conn *tls.Conn
	fr   *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer
	// connWin is what the server's connection window still lets us send.
	connWin int64
	pings   uint64
	// settings are those of the server's first SETTINGS frame.
	settings map[http2.SettingID]uint32
}

func dialRaw(t *testing.T, m *mesh, node netip.AddrPort, settings ...http2.Setting) *rawClient {
	t.Helper()
	raw, err := net.Dial("tcp", node.String())
	if err != nil {
		t.Fatal(err)
	}
	return rawClientOver(t, m, raw, settings...)
}

// rawClientOver is dialRaw over a TCP connection the caller has made.
func rawClientOver(t *testing.T, m *mesh, raw net.Conn, settings ...http2.Setting) *rawClient {
	t.Helper()
	conn := tls.Client(raw, &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{m.a},
		InsecureSkipVerify: true, // the server's identity is not what these tests check
		NextProtos:         []string{"h2"},
	})
	t.Cleanup(func() { conn.Close() })
	if err := conn.Handshake(); err != nil {
		t.Fatal(err)
	}
	// The connection window starts at 65535 whatever the settings say
	// (RFC 9113 §6.9.2).
	c := &rawClient{t: t, conn: conn, fr: http2.NewFramer(conn, conn), connWin: 65535}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hbuf)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	sf, ok := c.next().(*http2.SettingsFrame)
	if !ok {
		t.Fatal("the server's first frame is not SETTINGS")
	}
	c.settings = map[http2.SettingID]uint32{}
	sf.ForeachSetting(func(s http2.Setting) error { c.settings[s.ID] = s.Val; return nil })
	if err := c.fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	return c
}

// connect opens stream id as a CONNECT to dest, its request left open.
func (c *rawClient) connect(id uint32, dest netip.AddrPort, extra ...hpack.HeaderField) {
	c.t.Helper()
	c.request(id, append([]hpack.HeaderField{
		{Name: ":method", Value: "CONNECT"},
		{Name: ":authority", Value: dest.String()},
	}, extra...)...)
}

// request opens stream id with exactly these fields, its request left open.
func (c *rawClient) request(id uint32, fields ...hpack.HeaderField) {
	c.t.Helper()
	c.hbuf.Reset()
	for _, f := range fields {
		c.enc.WriteField(f)
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true}); err != nil {
		c.t.Fatal(err)
	}
}

// next reads the next frame the server sends, within 5 s.
func (c *rawClient) next() http2.Frame {
	c.t.Helper()
	f, err := c.read()
	if err != nil {
		c.t.Fatalf("reading a frame: %v", err)
	}
	return f
}

func (c *rawClient) read() (http2.Frame, error) {
	c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	f, err := c.fr.ReadFrame()
	if w, ok := f.(*http2.WindowUpdateFrame); ok && w.StreamID == 0 {
		c.connWin += int64(w.Increment)
	}
	return f, err
}

// send writes p as one DATA frame on stream id once the server's connection
// window has room for it, reading (and dropping) frames until then, as a
// client must wait (RFC 9113 §6.9.1). The stream's window is the caller's
// to respect.
func (c *rawClient) send(id uint32, p []byte) {
	c.t.Helper()
	for c.connWin < int64(len(p)) {
		if _, err := c.read(); err != nil {
			c.t.Fatalf("the connection window stayed at %d bytes, short of a %d-byte frame: %v", c.connWin, len(p), err)
		}
	}
	c.connWin -= int64(len(p))
	if err := c.fr.WriteData(id, false, p); err != nil {
		c.t.Fatal(err)
	}
}

// sync returns once the server has handled every frame sent before it: the
// loop that handles them answers PINGs in order (RFC 9113 §6.7). It
// returns the other frames it read meanwhile.
func (c *rawClient) sync() []http2.Frame {
	c.t.Helper()
	c.pings++
	var data [8]byte
	binary.BigEndian.PutUint64(data[:], c.pings)
	if err := c.fr.WritePing(false, data); err != nil {
		c.t.Fatal(err)
	}
	var skipped []http2.Frame
	for {
		f := c.next()
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() && p.Data == data {
			return skipped
		}
		skipped = append(skipped, f)
	}
}

// until reads frames up to the first one of type typ on stream id.
func (c *rawClient) until(typ http2.FrameType, id uint32) http2.Frame {
	c.t.Helper()
	for {
		if f := c.next(); f.Header().Type == typ && f.Header().StreamID == id {
			return f
		} else if g, ok := f.(*http2.GoAwayFrame); ok && typ != http2.FrameGoAway {
			c.t.Fatalf("GOAWAY (%v) while waiting for a %v frame", g.ErrCode, typ)
		}
	}
}

// goneAway reads up to the server's GOAWAY, checks its error code, and
// checks that the server then ends the connection (RFC 9113 §5.4.1).
func (c *rawClient) goneAway(code http2.ErrCode) {
	c.t.Helper()
	if g := c.until(http2.FrameGoAway, 0).(*http2.GoAwayFrame); g.ErrCode != code {
		c.t.Errorf("GOAWAY %v, want %v", g.ErrCode, code)
	}
	for {
		if _, err := c.read(); err != nil {
			if !errors.Is(err, io.EOF) {
				c.t.Errorf("after GOAWAY the connection ended with %v, want EOF", err)
			}
			return
		}
	}
}

// resetAlone returns once the server has handled every frame sent so far,
// checking that meanwhile it sent stream id one frame, RST_STREAM with
// code, and went on serving the connection (no GOAWAY).
func (c *rawClient) resetAlone(id uint32, code http2.ErrCode) {
	c.t.Helper()
	var got []http2.FrameHeader
	var rst *http2.RSTStreamFrame
	for _, f := range c.sync() {
		if g, ok := f.(*http2.GoAwayFrame); ok {
			c.t.Fatalf("GOAWAY %v, want a stream error", g.ErrCode)
		}
		if f.Header().StreamID == id {
			got = append(got, f.Header())
			rst, _ = f.(*http2.RSTStreamFrame)
		}
	}
	if len(got) != 1 || rst == nil || rst.ErrCode != code {
		c.t.Fatalf("stream %d got %v, want RST_STREAM %v alone", id, got, code)
	}
}
