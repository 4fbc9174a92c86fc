package hbone

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// A tunnel that fails reaches the destination as a TCP reset, never as a
// FIN: what the destination has read so far is a fragment, and a clean end
// of data would let it take the fragment for the whole (RFC 9113 §8.5).
func TestAbortedTunnelResetsTheDestination(t *testing.T) {
	cases := []struct {
		name  string
		abort func(c *rawClient)
	}{
		{name: "source resets the stream", abort: func(c *rawClient) {
			if err := c.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
				c.t.Fatal(err)
			}
		}},
		{name: "source's connection drops", abort: func(c *rawClient) { c.conn.Close() }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newMesh(t)
			dest, accepted := hold(t, "127.0.0.1:0")
			n := oneWorkloadNode(t, m, dest, nodeOpts{})
			c := dialRaw(t, m, n.at("127.0.0.2"))
			c.connect(1, dest)
			c.until(http2.FrameHeaders, 1)
			var up net.Conn
			select {
			case up = <-accepted:
			case <-time.After(5 * time.Second):
				t.Fatal("the node never dialled the destination")
			}
			defer up.Close()
			c.send(1, []byte("partial"))
			readFull(t, up, len("partial"))

			tc.abort(c)
			up.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err := up.Read(make([]byte, 1))
			if !errors.Is(err, syscall.ECONNRESET) {
				if err == io.EOF {
					t.Fatal("the destination saw a clean end of data, want a reset")
				}
				t.Fatalf("the destination read %v, want a reset", err)
			}
		})
	}
}
