package hbone

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestHalfClose holds a tunnel to TCP's half-close in both directions, with
// Go's own HTTP/2 client as the source: whichever side closes its write half
// first, its peer reads everything and then EOF, and can still answer
// through the same stream. The source's half-close travels as END_STREAM on
// the request and a FIN toward the destination; the destination's as a FIN
// and END_STREAM on the response.
func TestHalfClose(t *testing.T) {
	m := newMesh(t)
	dest, accepted := hold(t, "127.0.0.1:0")
	n := newNode(t, nodeOpts{
		certs:   map[netip.Addr]*tls.Certificate{netip.MustParseAddr("127.0.0.2"): &m.b},
		allowed: map[netip.Addr]bool{dest.Addr(): true},
		roots:   m.roots(),
	})
	cases := []struct {
		name string
		// first is the side that half-closes; the other side then sends
		// "reply" and closes.
		first string
	}{
		{name: "source half-closes", first: "source"},
		{name: "destination half-closes", first: "destination"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := openForeign(t, foreignClient(t, &m.a, m.roots(), nil), n.at("127.0.0.2"), dest)
			defer src.Close()
			var up *net.TCPConn
			select {
			case c := <-accepted:
				up = c.(*net.TCPConn)
			case <-time.After(5 * time.Second):
				t.Fatal("the node never dialled the destination")
			}
			defer up.Close()
			up.SetDeadline(time.Now().Add(10 * time.Second))

			if tc.first == "source" {
				io.WriteString(src.w, "request")
				src.w.Close() // END_STREAM
				if got, err := io.ReadAll(up); err != nil || string(got) != "request" {
					t.Fatalf("destination read %q, %v; want the request and EOF", got, err)
				}
				// The destination's half stays open: it answers.
				io.WriteString(up, "reply")
				up.Close()
				if got, err := io.ReadAll(src.body); err != nil || string(got) != "reply" {
					t.Errorf("source read %q, %v; want the reply and EOF", got, err)
				}
				return
			}

			io.WriteString(up, "banner")
			up.CloseWrite() // FIN, still reading
			if got, err := io.ReadAll(src.body); err != nil || string(got) != "banner" {
				t.Fatalf("source read %q, %v; want the banner and EOF", got, err)
			}
			// The source's half stays open: it answers, then ends its half.
			if _, err := io.WriteString(src.w, "reply"); err != nil {
				t.Fatalf("source write after the destination's half-close: %v", err)
			}
			src.w.Close() // END_STREAM
			if got, err := io.ReadAll(up); err != nil || string(got) != "reply" {
				t.Errorf("destination read %q, %v; want the reply and EOF", got, err)
			}
			eventually(t, "the tunnel to end", func() bool { return len(n.srv.OpenStreams()) == 0 })
			if log := n.log.String(); !strings.Contains(log, "sent=5 received=6") {
				t.Errorf("the tunnel did not end cleanly with both directions' bytes:\n%s", log)
			}
		})
	}
}

// foreignStream is one CONNECT tunnel opened with Go's HTTP/2 client.
type foreignStream struct {
	w    *io.PipeWriter // the request body, toward the destination
	body io.ReadCloser  // the response body, from the destination
}

func (s *foreignStream) Close() { s.w.Close(); s.body.Close() }

func openForeign(t *testing.T, c *http.Client, node, dest netip.AddrPort) *foreignStream {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodConnect, "https://"+node.String(), pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = dest.String()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT answered %d", resp.StatusCode)
	}
	return &foreignStream{w: pw, body: resp.Body}
}
