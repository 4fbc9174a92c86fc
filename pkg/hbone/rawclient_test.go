package hbone

import (
	"bytes"
	"crypto/tls"
	"io"
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
}

func dialRaw(t *testing.T, m *mesh, node netip.AddrPort, settings ...http2.Setting) *rawClient {
	t.Helper()
	conn, err := tls.Dial("tcp", node.String(), &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{m.a},
		InsecureSkipVerify: true, // the server's identity is not what these tests check
		NextProtos:         []string{"h2"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &rawClient{t: t, conn: conn, fr: http2.NewFramer(conn, conn)}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hbuf)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	if f := c.next(); f.Header().Type != http2.FrameSettings {
		t.Fatalf("first frame %v, want SETTINGS", f.Header())
	}
	if err := c.fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	return c
}

// connect opens stream id as a CONNECT to dest, its request left open.
func (c *rawClient) connect(id uint32, dest netip.AddrPort) {
	c.t.Helper()
	c.hbuf.Reset()
	c.enc.WriteField(hpack.HeaderField{Name: ":method", Value: "CONNECT"})
	c.enc.WriteField(hpack.HeaderField{Name: ":authority", Value: dest.String()})
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true}); err != nil {
		c.t.Fatal(err)
	}
}

// next reads the next frame the server sends, within 5 s.
func (c *rawClient) next() http2.Frame {
	c.t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	f, err := c.fr.ReadFrame()
	if err != nil {
		c.t.Fatalf("reading a frame: %v", err)
	}
	return f
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
