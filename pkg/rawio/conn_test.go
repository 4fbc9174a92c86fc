package rawio

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pair is one accepted connection and its dialled peer.
type pair struct {
	server net.Conn // accepted, through the listener under test
	client *net.TCPConn
}

// kinds are the two listeners whose connections every test compares: the
// net package's own and this package's, which must behave the same.
var kinds = []struct {
	name string
	wrap func(net.Listener) net.Listener
}{
	{"net", func(l net.Listener) net.Listener { return l }},
	{"raw", func(l net.Listener) net.Listener { return Listener(l, 0) }},
}

func newPair(t *testing.T, wrap func(net.Listener) net.Listener) pair {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := wrap(l).Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return pair{server: server, client: client.(*net.TCPConn)}
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestListenerWrapsTCPConnections(t *testing.T) {
	p := newPair(t, kinds[1].wrap)
	if _, plain := p.server.(*net.TCPConn); plain == Enabled {
		t.Fatalf("accepted %T; raw I/O enabled: %v", p.server, Enabled)
	}
}

// TestRoundTrip sends payloads both ways; the larger ones fill the socket
// buffers, so the raw calls meet EAGAIN and wait on the poller.
func TestRoundTrip(t *testing.T) {
	for _, k := range kinds {
		for _, size := range []struct {
			name string
			n    int
		}{{"1B", 1}, {"64KiB", 64 << 10}, {"16MiB", 16 << 20}} {
			t.Run(k.name+"/"+size.name, func(t *testing.T) {
				p := newPair(t, k.wrap)
				want := randomBytes(t, size.n)
				for _, dir := range []struct {
					name     string
					from, to net.Conn
				}{{"server to client", p.server, p.client}, {"client to server", p.client, p.server}} {
					errc := make(chan error, 1)
					go func() {
						n, err := dir.from.Write(want)
						if err == nil && n != len(want) {
							err = io.ErrShortWrite
						}
						errc <- err
					}()
					got := make([]byte, size.n)
					if _, err := io.ReadFull(dir.to, got); err != nil {
						t.Fatalf("%s: read: %v", dir.name, err)
					}
					if err := <-errc; err != nil {
						t.Fatalf("%s: write: %v", dir.name, err)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("%s: the bytes read differ from those written", dir.name)
					}
				}
			})
		}
	}
}

// TestErrorsMatchNet checks that each failure reads as net.TCPConn's: the
// same n, io.EOF unwrapped, and the same errors under *net.OpError.
func TestErrorsMatchNet(t *testing.T) {
	type result struct {
		n       int
		err     error
		eof     bool
		closed  bool
		timeout bool
		reset   bool
		op      string
	}
	describe := func(n int, err error) result {
		r := result{n: n, err: err, eof: err == io.EOF, closed: errors.Is(err, net.ErrClosed),
			reset: errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)}
		var ne net.Error
		r.timeout = errors.As(err, &ne) && ne.Timeout() && errors.Is(err, os.ErrDeadlineExceeded)
		var op *net.OpError
		if errors.As(err, &op) {
			r.op = op.Op
		}
		return r
	}
	cases := []struct {
		name string
		run  func(t *testing.T, p pair) result
		want result
	}{
		{"read after the peer closed", func(t *testing.T, p pair) result {
			p.client.Close()
			return describe(p.server.Read(make([]byte, 16)))
		}, result{eof: true}},
		{"empty read", func(t *testing.T, p pair) result {
			return describe(p.server.Read(nil))
		}, result{}},
		{"read past its deadline", func(t *testing.T, p pair) result {
			p.server.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			return describe(p.server.Read(make([]byte, 16)))
		}, result{timeout: true, op: "read"}},
		{"write past its deadline to a peer that does not read", func(t *testing.T, p pair) result {
			p.server.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			n, err := p.server.Write(make([]byte, 64<<20))
			if n == 0 || n == 64<<20 {
				t.Errorf("wrote %d bytes before the deadline, want some but not all", n)
			}
			return describe(0, err)
		}, result{timeout: true, op: "write"}},
		{"read after close", func(t *testing.T, p pair) result {
			p.server.Close()
			return describe(p.server.Read(make([]byte, 16)))
		}, result{closed: true, op: "read"}},
		{"write after close", func(t *testing.T, p pair) result {
			p.server.Close()
			return describe(p.server.Write([]byte("x")))
		}, result{closed: true, op: "write"}},
		{"read from a peer that reset", func(t *testing.T, p pair) result {
			p.client.SetLinger(0)
			p.client.Close()
			time.Sleep(10 * time.Millisecond)
			return describe(p.server.Read(make([]byte, 16)))
		}, result{reset: true, op: "read"}},
		{"writes to a peer that reset", func(t *testing.T, p pair) result {
			p.client.SetLinger(0)
			p.client.Close()
			time.Sleep(10 * time.Millisecond)
			for range 100 {
				if _, err := p.server.Write([]byte("x")); err != nil {
					return describe(0, err)
				}
			}
			return result{}
		}, result{reset: true, op: "write"}},
	}
	for _, tc := range cases {
		for _, k := range kinds {
			t.Run(tc.name+"/"+k.name, func(t *testing.T) {
				got := tc.run(t, newPair(t, k.wrap))
				err := got.err
				got.err = nil // compared by its kind above, not its text
				if got != tc.want {
					t.Errorf("got %+v (error %v), want %+v", got, err, tc.want)
				}
			})
		}
	}
}

// TestConcurrentWritesStayWhole: net.Conn lets goroutines write at once,
// and each Write's bytes must reach the peer together.
func TestConcurrentWritesStayWhole(t *testing.T) {
	const writers, records, size = 4, 200, 48 << 10
	p := newPair(t, kinds[1].wrap)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			rec := bytes.Repeat([]byte{byte(w)}, size)
			for range records {
				if _, err := p.server.Write(rec); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	rec := make([]byte, size)
	for i := range writers * records {
		if _, err := io.ReadFull(p.client, rec); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if bytes.Count(rec, rec[:1]) != size {
			t.Fatalf("record %d mixes the bytes of two writes", i)
		}
	}
	wg.Wait()
}

// TestUserTimeout: gRPC sets TCP_USER_TIMEOUT on a *net.TCPConn only, so
// the listener sets it on the connections it wraps.
func TestUserTimeout(t *testing.T) {
	if !Enabled {
		t.Skip("this build hands out plain connections (race detector or not Linux), on which gRPC sets the option itself")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c := acceptOne(t, l, 7*time.Second)
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ms int
	var serr error
	if err := raw.Control(func(fd uintptr) {
		ms, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	if ms != 7000 {
		t.Errorf("TCP_USER_TIMEOUT = %d ms, want 7000", ms)
	}
}

func TestOtherConnectionsPassThrough(t *testing.T) {
	path := t.TempDir() + "/s"
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c := acceptOne(t, l, time.Second)
	if _, ok := c.(*net.UnixConn); !ok {
		t.Errorf("accepted %T, want the *net.UnixConn itself", c)
	}
}

// acceptOne dials l and returns the connection Listener(l, userTimeout)
// accepts; both ends close when the test ends.
func acceptOne(t *testing.T, l net.Listener, userTimeout time.Duration) net.Conn {
	t.Helper()
	dialled := make(chan net.Conn, 1)
	go func() {
		c, err := net.Dial(l.Addr().Network(), l.Addr().String())
		if err != nil {
			t.Error(err)
		}
		dialled <- c
	}()
	c, err := Listener(l, userTimeout).Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		if d := <-dialled; d != nil {
			d.Close()
		}
	})
	return c
}
