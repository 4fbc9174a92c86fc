package hbone

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

func newDialer(t *testing.T, m *mesh) (*Dialer, *Counters) {
	t.Helper()
	c := &Counters{}
	d, err := NewDialer(DialerConfig{Roots: m.roots, Metrics: c})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, c
}

// roundTrip writes, half-closes and reads the echo to its end.
func roundTrip(t *testing.T, c *Conn, payload string) string {
	t.Helper()
	if _, err := io.WriteString(c, payload); err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatalf("close write: %v", err)
	}
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(got)
}

func TestDialerPools(t *testing.T) {
	m := newMesh(t)
	dest := echo(t, "127.0.0.1:0")
	n := newNode(t, nodeOpts{
		certs: map[netip.Addr]*tls.Certificate{
			netip.MustParseAddr("127.0.0.2"): &m.b,
			netip.MustParseAddr("127.0.0.3"): &m.c,
		},
		allowed: map[netip.Addr]bool{dest.Addr(): true},
		roots:   m.roots(),
	})
	d, dc := newDialer(t, m)

	// Each step opens streams concurrently and says how many HTTP/2
	// connections the pool must hold afterwards.
	steps := []struct {
		name      string
		src       *tls.Certificate
		target    Target
		streams   int
		wantConns int
	}{
		{name: "many streams, one connection", src: &m.a, target: Target{Node: n.at("127.0.0.2"), Dest: dest, Identity: idB}, streams: 20, wantConns: 1},
		{name: "same key again reuses it", src: &m.a, target: Target{Node: n.at("127.0.0.2"), Dest: dest, Identity: idB}, streams: 5, wantConns: 1},
		{name: "another source identity", src: &m.d, target: Target{Node: n.at("127.0.0.2"), Dest: dest, Identity: idB}, streams: 5, wantConns: 2},
		{name: "another node", src: &m.a, target: Target{Node: n.at("127.0.0.3"), Dest: dest, Identity: idC}, streams: 5, wantConns: 3},
		{name: "another expected identity", src: &m.a, target: Target{Node: n.at("127.0.0.2"), Dest: dest}, streams: 5, wantConns: 4},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			var wg sync.WaitGroup
			errs := make(chan error, st.streams)
			conns := make([]*Conn, st.streams)
			for i := range st.streams {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := d.Dial(context.Background(), st.src, st.target)
					conns[i] = c
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			// All streams are open at once on the pooled connections.
			if got := d.PoolSize(); got != st.wantConns {
				t.Errorf("pool holds %d connections, want %d", got, st.wantConns)
			}
			if got := n.counters.Conns[Inbound].Load(); got != int64(st.wantConns) {
				t.Errorf("server accepted %d connections, want %d", got, st.wantConns)
			}
			for _, c := range conns {
				if got := roundTrip(t, c, "ping"); got != "echo:ping" {
					t.Errorf("echo = %q", got)
				}
				c.Close()
			}
		})
	}
	if got := dc.Streams[Outbound].Load(); got != 40 {
		t.Errorf("outbound streams counted = %d, want 40", got)
	}
	eventually(t, "every stream's close to be counted", func() bool { return dc.OpenStreams[Outbound].Load() == 0 })
}

func TestDialerVerifiesServer(t *testing.T) {
	m := newMesh(t)
	other := newMesh(t)
	dest := echo(t, "127.0.0.1:0")
	n := oneWorkloadNode(t, m, dest, nodeOpts{})
	cases := []struct {
		name   string
		dialer *mesh // whose roots the dialer trusts
		want   string
	}{
		{name: "wrong identity", dialer: m, want: idC},
		{name: "another root", dialer: other, want: idB},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, dc := newDialer(t, tc.dialer)
			_, err := d.Dial(context.Background(), &tc.dialer.a, Target{Node: n.at("127.0.0.2"), Dest: dest, Identity: tc.want})
			if err == nil {
				t.Fatal("tunnel opened to the wrong server")
			}
			if dc.Refusals(Outbound, ReasonTransport) != 1 || d.PoolSize() != 0 {
				t.Errorf("refusal not counted or connection pooled: %v", err)
			}
		})
	}
}

func TestDialerStatus(t *testing.T) {
	m := newMesh(t)
	dest := echo(t, "127.0.0.1:0")
	n := oneWorkloadNode(t, m, dest, nodeOpts{})
	d, _ := newDialer(t, m)
	_, err := d.Dial(context.Background(), &m.a, Target{Node: n.at("127.0.0.2"), Dest: netip.MustParseAddrPort("10.1.1.1:80")})
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 403 {
		t.Fatalf("got %v, want a 403 StatusError", err)
	}
	// The refusal ended one stream, not the pooled connection.
	if c, err := d.Dial(context.Background(), &m.a, Target{Node: n.at("127.0.0.2"), Dest: dest}); err != nil {
		t.Fatal(err)
	} else if got := roundTrip(t, c, "x"); got != "echo:x" || n.counters.Conns[Inbound].Load() != 1 {
		t.Errorf("after a refusal: %q over %d connections", got, n.counters.Conns[Inbound].Load())
	}
}

// hold is a destination that accepts and keeps connections open, reporting
// each one it accepted.
func hold(t *testing.T, addr string) (netip.AddrPort, chan net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 100)
	t.Cleanup(func() {
		l.Close()
		for len(accepted) > 0 {
			(<-accepted).Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	return netip.MustParseAddrPort(l.Addr().String()), accepted
}

func TestCloseDestination(t *testing.T) {
	m := newMesh(t)
	gone, goneConns := hold(t, "127.0.0.4:0")
	stays := echo(t, "127.0.0.5:0")
	n := newNode(t, nodeOpts{
		certs:   map[netip.Addr]*tls.Certificate{netip.MustParseAddr("127.0.0.2"): &m.b},
		allowed: map[netip.Addr]bool{gone.Addr(): true, stays.Addr(): true},
		roots:   m.roots(),
	})
	d, _ := newDialer(t, m)
	dial := func(dest netip.AddrPort) *Conn {
		c, err := d.Dial(context.Background(), &m.a, Target{Node: n.at("127.0.0.2"), Dest: dest})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var toGone, toStays []*Conn
	for range 3 {
		toGone = append(toGone, dial(gone))
	}
	for range 2 {
		toStays = append(toStays, dial(stays))
	}
	var upstream []net.Conn
	for range 3 {
		upstream = append(upstream, <-goneConns)
	}

	if got := n.srv.CloseDestination(gone.Addr()); got != 3 {
		t.Fatalf("closed %d streams, want 3", got)
	}
	for i, c := range toGone {
		done := make(chan error, 1)
		go func() { _, err := c.Read(make([]byte, 1)); done <- err }()
		select {
		case err := <-done:
			// A reset, not a clean end: the source must not take a
			// truncated stream for a complete one.
			if err == nil || err == io.EOF {
				t.Errorf("stream %d to the departed workload: read err %v, want a reset", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("stream %d to the departed workload is still open", i)
		}
	}
	for i, u := range upstream {
		u.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := u.Read(make([]byte, 1)); err == nil || isDeadline(err) {
			t.Errorf("upstream connection %d still open: %v", i, err)
		}
	}
	for _, c := range toStays {
		if got := roundTrip(t, c, "still here"); got != "echo:still here" {
			t.Errorf("stream to the other workload: %q", got)
		}
	}
	eventually(t, "every stream to be unregistered", func() bool { return len(n.srv.OpenStreams()) == 0 })
}

// The destination speaks first and closes; the source reads all of it and
// then EOF. And a destination that resets makes the source see an error.
func TestHalfCloseFromDestination(t *testing.T) {
	m := newMesh(t)
	speaker, speakerConns := hold(t, "127.0.0.1:0")
	n := newNode(t, nodeOpts{
		certs:   map[netip.Addr]*tls.Certificate{netip.MustParseAddr("127.0.0.2"): &m.b},
		allowed: map[netip.Addr]bool{speaker.Addr(): true},
		roots:   m.roots(),
	})
	d, _ := newDialer(t, m)
	cases := []struct {
		name    string
		end     func(net.Conn)
		wantErr bool
	}{
		{name: "FIN", end: func(c net.Conn) { c.(*net.TCPConn).CloseWrite() }},
		{name: "RST", end: func(c net.Conn) { c.(*net.TCPConn).SetLinger(0); c.Close() }, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := d.Dial(context.Background(), &m.a, Target{Node: n.at("127.0.0.2"), Dest: speaker})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			u := <-speakerConns
			u.Write([]byte("banner"))
			if tc.wantErr {
				// Let the banner cross before the reset overtakes it.
				buf := make([]byte, 6)
				if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "banner" {
					t.Fatalf("banner %q: %v", buf, err)
				}
			}
			tc.end(u)
			got, err := io.ReadAll(c)
			if tc.wantErr {
				if err == nil {
					t.Errorf("reset destination: read ended cleanly")
				}
				return
			}
			if err != nil || string(got) != "banner" {
				t.Errorf("got %q, %v; want the banner and EOF", got, err)
			}
			// The source's half outlives the destination's.
			if _, err := c.Write([]byte("reply")); err != nil {
				t.Fatalf("write after the destination's half-close: %v", err)
			}
			c.CloseWrite()
			u.SetReadDeadline(time.Now().Add(5 * time.Second))
			if got, err := io.ReadAll(u); err != nil || string(got) != "reply" {
				t.Errorf("destination read %q, %v; want the reply and EOF", got, err)
			}
			u.Close()
		})
	}
}

func TestShutdownDrains(t *testing.T) {
	m := newMesh(t)
	dest := echo(t, "127.0.0.1:0")
	n := oneWorkloadNode(t, m, dest, nodeOpts{})
	d, _ := newDialer(t, m)
	target := Target{Node: n.at("127.0.0.2"), Dest: dest}
	c, err := d.Dial(context.Background(), &m.a, target)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- n.srv.Shutdown(ctx)
	}()
	eventually(t, "the listener to close", func() bool {
		conn, err := net.Dial("tcp", target.Node.String())
		if err == nil {
			conn.Close()
		}
		return err != nil
	})
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a stream open", err)
	default:
	}
	// The open stream still works to its end.
	if got := roundTrip(t, c, "last words"); got != "echo:last words" {
		t.Errorf("draining stream: %q", got)
	}
	c.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return after the last stream ended")
	}

	// A deadline cuts what is left.
	n2 := newNode(t, nodeOpts{
		certs:   map[netip.Addr]*tls.Certificate{netip.MustParseAddr("127.0.0.3"): &m.c},
		allowed: map[netip.Addr]bool{dest.Addr(): true},
		roots:   m.roots(),
	})
	c2, err := d.Dial(context.Background(), &m.a, Target{Node: n2.at("127.0.0.3"), Dest: dest})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := n2.srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with a stuck stream: %v", err)
	}
	if _, err := c2.Read(make([]byte, 1)); err == nil {
		t.Errorf("stream survived a forced shutdown")
	}
}

// isDeadline reports whether err is a timeout, not the stream's end.
func isDeadline(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
