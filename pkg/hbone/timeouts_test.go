package hbone

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// A connection is closed, GOAWAY first, once it has had no stream for the
// idle timeout; an open stream keeps it however long it lasts.
func TestServerClosesIdleConnections(t *testing.T) {
	// The idle clock starts with the server's SETTINGS, before the CONNECT
	// below: long enough that a loaded machine sends it in time.
	const idle = time.Second
	m := newMesh(t)
	dest := echo(t, "127.0.0.1:0")
	n := oneWorkloadNode(t, m, dest, nodeOpts{idleTimeout: idle})
	c := dialRaw(t, m, n.at("127.0.0.2"))
	c.connect(1, dest)
	if h := c.until(http2.FrameHeaders, 1).(*http2.MetaHeadersFrame); h.PseudoValue("status") != "200" {
		t.Fatalf("CONNECT answered %q", h.PseudoValue("status"))
	}
	time.Sleep(2 * idle) // the stream is open: no GOAWAY may come
	if err := c.fr.WriteData(1, true, []byte("still here")); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for {
		d := c.until(http2.FrameData, 1).(*http2.DataFrame)
		got = append(got, d.Data()...)
		if d.StreamEnded() {
			break
		}
	}
	if string(got) != "echo:still here" {
		t.Fatalf("tunnel answered %q", got)
	}
	// The stream is over: the connection is idle now.
	if g := c.until(http2.FrameGoAway, 0).(*http2.GoAwayFrame); g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 1 {
		t.Fatalf("GOAWAY %v, last stream %d; want NO_ERROR, 1", g.ErrCode, g.LastStreamID)
	}
	c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.fr.ReadFrame(); !errors.Is(err, io.EOF) {
		t.Fatalf("after GOAWAY: %v, want the connection closed", err)
	}
}

// A client that stops reading loses its connection once a write has been
// stuck for the write timeout, and the destinations of its streams are
// hung up on, instead of the node holding both for good.
func TestServerDropsAPeerThatStopsReading(t *testing.T) {
	m := newMesh(t)
	// A destination that sends until it cannot.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	stuck := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		chunk := make([]byte, 64<<10)
		for {
			if _, err := c.Write(chunk); err != nil {
				stuck <- err
				return
			}
		}
	}()
	dest := netip.MustParseAddrPort(l.Addr().String())
	n := oneWorkloadNode(t, m, dest, nodeOpts{writeTimeout: 200 * time.Millisecond})
	// Windows as large as HTTP/2 allows: only TCP can stop the node.
	c := dialRaw(t, m, n.at("127.0.0.2"), http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	if err := c.fr.WriteWindowUpdate(0, 1<<31-1-65535); err != nil {
		t.Fatal(err)
	}
	c.connect(1, dest)
	// From here on the client reads nothing.
	select {
	case err := <-stuck:
		t.Logf("the destination was hung up on: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the node still holds a tunnel to a client that stopped reading")
	}
}
