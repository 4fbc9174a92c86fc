package nodeproxy

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// A connection the proxy relays ends the way its far side ended: a FIN as
// a FIN, so a half-closed client still gets its answer, and a reset as a
// reset, so neither end takes a broken connection for a complete one.
func TestPipeCarriesHowTheOtherSideEnded(t *testing.T) {
	cases := []struct {
		name string
		// end ends one side's connection after it sent "hello"; the
		// other side must then read EOF, or a reset when wantReset.
		end       func(c *net.TCPConn)
		fromDest  bool // end the destination's side (else the client's)
		wantReset bool
	}{
		{name: "destination closes", end: closeConn, fromDest: true},
		{name: "client closes", end: closeConn},
		{name: "destination resets", end: resetConn, fromDest: true, wantReset: true},
		{name: "client resets", end: resetConn, wantReset: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client, a := tcpPair(t)
			b, dest := tcpPair(t)
			done := make(chan struct{})
			go func() { pipe(a, b); close(done) }()

			ender, other := client, dest
			if tc.fromDest {
				ender, other = dest, client
			}
			if _, err := ender.Write([]byte("hello")); err != nil {
				t.Fatal(err)
			}
			other.SetReadDeadline(time.Now().Add(5 * time.Second))
			got := make([]byte, 5)
			if _, err := io.ReadFull(other, got); err != nil || string(got) != "hello" {
				t.Fatalf("read %q, %v", got, err)
			}
			tc.end(ender)
			_, err := other.Read(make([]byte, 1))
			switch {
			case tc.wantReset && !errors.Is(err, syscall.ECONNRESET):
				t.Errorf("after a reset the other side read %v, want a reset", err)
			case !tc.wantReset && err != io.EOF:
				t.Errorf("after a close the other side read %v, want EOF", err)
			}
			other.Close()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("pipe did not return")
			}
		})
	}
}

func closeConn(c *net.TCPConn) { c.Close() }

func resetConn(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (dialled, accepted *net.TCPConn) {
	t.Helper()
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dialled, err = net.DialTCP("tcp", nil, l.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	if accepted, err = l.AcceptTCP(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dialled.Close(); accepted.Close() })
	return dialled, accepted
}
