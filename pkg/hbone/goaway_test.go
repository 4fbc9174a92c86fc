package hbone

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// After a connection error the node sends GOAWAY with its code and the last
// stream it processed (RFC 9113 §5.4.1, §6.8), and the source gets to read
// it even when it is slow to read and has sent frames the node will never
// read. Closing a socket with unread bytes in it aborts the connection: the
// kernel drops what it has not sent yet, the GOAWAY among it, and sends a
// TCP reset. After a graceful GOAWAY the error still gets its own, with a
// last stream ID no higher than the first's (§6.8).
func TestGoAwayReachesASlowSourceAfterAConnectionError(t *testing.T) {
	m := newMesh(t)
	type goAway struct {
		code http2.ErrCode
		last uint32
	}
	cases := []struct {
		name     string
		graceful bool // Shutdown first: GOAWAY NO_ERROR, stream 1 still open
		want     []goAway
	}{
		{name: "serving", want: []goAway{{http2.ErrCodeFlowControl, 3}}},
		{name: "after a graceful GOAWAY", graceful: true,
			want: []goAway{{http2.ErrCodeNo, 3}, {http2.ErrCodeFlowControl, 3}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, c := slowReader(t, m)
			// Stream 3 is refused as malformed, but it was received:
			// the last stream ID counts it (§5.4.1).
			c.connect(3, nowhere, hpack.HeaderField{Name: "connection", Value: "close"})
			hc := n.onlyConn(t)
			eventually(t, "stream 3 to be refused", func() bool {
				hc.mu.Lock()
				defer hc.mu.Unlock()
				return hc.lastID == 3 && len(hc.streams) == 1
			})
			if tc.graceful {
				ctx, cancel := context.WithCancel(context.Background())
				t.Cleanup(cancel)
				go n.srv.Shutdown(ctx)
				eventually(t, "the graceful GOAWAY", func() bool {
					hc.mu.Lock()
					defer hc.mu.Unlock()
					return hc.goingAway
				})
			}

			// After a graceful GOAWAY, stream 5, which the node
			// refuses and which must not raise the last stream ID;
			// then the connection's window past 2^31-1 (§6.9.1), a
			// connection error; then frames the node never reads.
			var out bytes.Buffer
			fr := http2.NewFramer(&out, nil)
			c.hbuf.Reset()
			c.enc.WriteField(hpack.HeaderField{Name: ":method", Value: "CONNECT"})
			c.enc.WriteField(hpack.HeaderField{Name: ":authority", Value: nowhere.String()})
			if tc.graceful {
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: c.hbuf.Bytes(), EndHeaders: true})
			}
			fr.WriteWindowUpdate(0, 1<<31-1)
			for i := range 20000 {
				fr.WritePing(false, [8]byte{byte(i)})
			}
			go c.conn.Write(out.Bytes()) // fails once the node has gone
			// Time for the node to answer, and to close if it does
			// so at once.
			time.Sleep(300 * time.Millisecond)

			var got []goAway
			for {
				f, err := c.read()
				if err != nil {
					if !errors.Is(err, io.EOF) {
						t.Errorf("the connection ended with %v, want EOF", err)
					}
					break
				}
				if g, ok := f.(*http2.GoAwayFrame); ok {
					got = append(got, goAway{g.ErrCode, g.LastStreamID})
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("GOAWAYs %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("GOAWAYs %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// slowReader is a node and a raw client of it that has stopped reading,
// with stream 1 open: the node has sent as much of the destination's data as
// the flow-control windows allow, which fills the client's small receive
// buffer, and more waits in the node's socket to be sent. Anything the node
// writes now, it can only queue behind that data.
func slowReader(t *testing.T, m *mesh) (*node, *rawClient) {
	t.Helper()
	gate := make(dialGate)
	n := oneWorkloadNode(t, m, nowhere, nodeOpts{dial: gate.dial})
	// A connection of the node's own, accepted here to size its send
	// buffer: roomy, so that no write of the node's blocks.
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.(*net.TCPConn).SetWriteBuffer(4 << 20)
		n.srv.ServeConn(c)
	}()
	raw, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	raw.(*net.TCPConn).SetReadBuffer(64 << 10)
	const window = 1 << 20
	c := rawClientOver(t, m, raw, http2.Setting{ID: http2.SettingInitialWindowSize, Val: window})
	if err := c.fr.WriteWindowUpdate(0, window); err != nil {
		t.Fatal(err)
	}
	c.connect(1, nowhere)
	up := gate.next(t).connect(t)
	c.until(http2.FrameHeaders, 1)
	go up.Write(make([]byte, window+1)) // blocks on the last byte

	hc := n.onlyConn(t)
	eventually(t, "the node to send stream 1's window", func() bool {
		hc.mu.Lock()
		defer hc.mu.Unlock()
		st := hc.streams[1]
		return st != nil && st.sendWin == 0
	})
	return n, c
}
