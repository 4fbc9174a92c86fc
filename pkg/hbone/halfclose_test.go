package hbone

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"
)

// TestHalfClose pins down what a half-close carries through a tunnel, with
// Go's own HTTP/2 client as the source.
//
// The source's half-close is carried: its END_STREAM becomes a FIN toward
// the destination, which may go on answering.
//
// The destination's is not, and cannot be with x/net's HTTP/2 server: a
// handler ends its response (END_STREAM) only by returning, and a server
// that ends its response while the request is still open sends
// RST_STREAM(NO_ERROR) right after, which HTTP/2 allows and which tells the
// client to stop sending. So the source reads everything and then EOF, but
// the stream is over: its later writes fail or are dropped, and the
// destination's connection is closed, not left half-open.
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
		// carried: the other side could still send after the half-close,
		// and its bytes arrived.
		carried bool
	}{
		{name: "source half-closes", first: "source", carried: true},
		{name: "destination half-closes", first: "destination", carried: false},
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
			// The source's half did not survive: writing soon fails, once
			// the RST_STREAM(NO_ERROR) has reached the client...
			eventually(t, "the source's writes to fail", func() bool {
				_, err := io.WriteString(src.w, "reply")
				return err != nil
			})
			// ...and the destination sees its connection end without the
			// source's bytes.
			got, _ := io.ReadAll(up)
			if carried := len(got) > 0; carried != tc.carried {
				t.Errorf("destination read %q after its half-close", got)
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
