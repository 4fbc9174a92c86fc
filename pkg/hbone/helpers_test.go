package hbone

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/meshpilot/meshpilot/internal/testcerts"
)

const (
	idA = "spiffe://cluster.local/ns/default/sa/a"
	idB = "spiffe://cluster.local/ns/default/sa/b"
	idC = "spiffe://cluster.local/ns/default/sa/c"
	idD = "spiffe://cluster.local/ns/other/sa/d"
)

// mesh is one trust domain's root and a few workload certificates.
type mesh struct {
	ca         *testcerts.CA
	a, b, c, d tls.Certificate
}

func newMesh(t testing.TB) *mesh {
	ca := testcerts.NewCA(t, "cluster.local")
	return &mesh{ca: ca, a: ca.Issue(t, idA), b: ca.Issue(t, idB), c: ca.Issue(t, idC), d: ca.Issue(t, idD)}
}

func (m *mesh) roots() *x509.CertPool { return m.ca.Pool }

// syncBuffer collects log output from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// echo is a destination that reads until the source half-closes, then
// answers "echo:" and what it read, then closes. Answering only after EOF
// proves the source's half-close crossed the tunnel.
func echo(t testing.TB, addr string) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				got, err := io.ReadAll(c)
				if err != nil {
					return
				}
				c.Write(append([]byte("echo:"), got...))
			}()
		}
	}()
	return netip.MustParseAddrPort(l.Addr().String())
}

// node is a Server listening on some loopback addresses, each standing for a
// workload it serves: the certificate is picked by the address dialled.
type node struct {
	srv      *Server
	counters *Counters
	log      *syncBuffer
	port     uint16
	dials    atomic.Int64
}

type nodeOpts struct {
	certs   map[netip.Addr]*tls.Certificate // listening address → served certificate
	allowed map[netip.Addr]bool             // destinations Authorize lets through
	roots   *x509.CertPool
	// authorize, when set, is asked after allowed has let a stream through.
	authorize func(context.Context, StreamInfo) error
	// dial, when set, stands in for dialling the destination over TCP.
	dial func(context.Context, netip.AddrPort) (net.Conn, error)
	// Zero leaves the server's defaults.
	idleTimeout, writeTimeout time.Duration
}

func newNode(t testing.TB, o nodeOpts) *node {
	t.Helper()
	n := &node{counters: &Counters{}, log: &syncBuffer{}}
	srv, err := NewServer(ServerConfig{
		Certificate: func(_ context.Context, local netip.AddrPort) (*tls.Certificate, error) {
			if c := o.certs[local.Addr()]; c != nil {
				return c, nil
			}
			return nil, errors.New("no workload at this address")
		},
		Roots: func() *x509.CertPool { return o.roots },
		Authorize: func(ctx context.Context, s StreamInfo) error {
			if !o.allowed[s.Dest.Addr()] {
				return fmt.Errorf("%s is not a local workload", s.Dest.Addr())
			}
			if o.authorize != nil {
				return o.authorize(ctx, s)
			}
			return nil
		},
		Dial: func(ctx context.Context, dest netip.AddrPort) (net.Conn, error) {
			n.dials.Add(1)
			if o.dial != nil {
				return o.dial(ctx, dest)
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", dest.String())
		},
		Metrics:      n.counters,
		Log:          slog.New(slog.NewTextHandler(n.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		IdleTimeout:  o.idleTimeout,
		WriteTimeout: o.writeTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	n.srv = srv
	// All listeners share one port, as :15008 does on every address.
	first := true
	for addr := range o.certs {
		port := "0"
		if !first {
			port = fmt.Sprint(n.port)
		}
		l, err := net.Listen("tcp", net.JoinHostPort(addr.String(), port))
		if err != nil {
			t.Fatal(err)
		}
		if first {
			n.port = uint16(l.Addr().(*net.TCPAddr).Port)
			first = false
		}
		go srv.Serve(l)
	}
	t.Cleanup(func() { srv.Close() })
	return n
}

// oneWorkloadNode is a node whose one workload, b, listens at 127.0.0.2,
// with dest the only destination it lets through.
func oneWorkloadNode(t testing.TB, m *mesh, dest netip.AddrPort, o nodeOpts) *node {
	o.certs = map[netip.Addr]*tls.Certificate{netip.MustParseAddr("127.0.0.2"): &m.b}
	o.allowed = map[netip.Addr]bool{dest.Addr(): true}
	o.roots = m.roots()
	return newNode(t, o)
}

// tunnel is a node whose dials the test answers, a raw client of it, and
// stream 1 open through it to dest.
type tunnel struct {
	n    *node
	gate dialGate
	c    *rawClient
	up   net.Conn // the destination's end of stream 1
}

func openTunnel(t *testing.T, m *mesh, dest netip.AddrPort) tunnel {
	t.Helper()
	gate := make(dialGate)
	n := oneWorkloadNode(t, m, dest, nodeOpts{dial: gate.dial})
	c := dialRaw(t, m, n.at("127.0.0.2"))
	c.connect(1, dest)
	up := gate.next(t).connect(t)
	c.until(http2.FrameHeaders, 1)
	return tunnel{n: n, gate: gate, c: c, up: up}
}

// dialGate hands each of a node's dials to the test, which connects it to a
// pipe or fails it; a dial whose context ends first gives up.
type dialGate chan *pendingDial

type pendingDial struct {
	ctx    context.Context
	answer chan net.Conn // nil fails the dial
}

func (g dialGate) dial(ctx context.Context, _ netip.AddrPort) (net.Conn, error) {
	p := &pendingDial{ctx: ctx, answer: make(chan net.Conn, 1)}
	select {
	case g <- p:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case c := <-p.answer:
		if c == nil {
			return nil, errors.New("destination refused")
		}
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// next returns the node's next dial.
func (g dialGate) next(t testing.TB) *pendingDial {
	t.Helper()
	select {
	case p := <-g:
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("the node did not dial")
		return nil
	}
}

// connect completes the dial with a pipe and returns the destination's end,
// which reads nothing unless the test does: what the node relays stays
// queued in the node.
func (p *pendingDial) connect(t testing.TB) net.Conn {
	a, b := net.Pipe()
	t.Cleanup(func() { b.Close() })
	p.answer <- a
	return b
}

// connectTCP completes the dial with a loopback TCP connection, which
// unlike a pipe can be half-closed, and returns the destination's end.
func (p *pendingDial) connectTCP(t *testing.T) net.Conn {
	t.Helper()
	dest, accepted := hold(t, "127.0.0.1:0")
	a, err := net.Dial("tcp", dest.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	p.answer <- a
	up := <-accepted
	t.Cleanup(func() { up.Close() })
	return up
}

func (p *pendingDial) fail() { p.answer <- nil }

// onlyConn is the node's one HTTP/2 connection, for looking at its state.
func (n *node) onlyConn(t testing.TB) *h2conn {
	t.Helper()
	n.srv.mu.Lock()
	defer n.srv.mu.Unlock()
	if len(n.srv.h2conns) != 1 {
		t.Fatalf("the node has %d HTTP/2 connections, want 1", len(n.srv.h2conns))
	}
	for c := range n.srv.h2conns {
		return c
	}
	return nil
}

func (n *node) at(ip string) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(ip), n.port)
}

// eventually polls cond for up to 5 s; the data path's effects are
// asynchronous (a reset frame, a closed socket).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !waitUntil(5*time.Second, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// waitUntil polls cond until it holds or d passes, and reports whether it
// held.
func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// relays checks that stream 1 of the tunnel still carries bytes both ways.
func (tun tunnel) relays(t *testing.T) {
	t.Helper()
	tun.c.send(1, []byte("ping"))
	got := make([]byte, len("ping"))
	tun.up.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(tun.up, got); err != nil || string(got) != "ping" {
		t.Fatalf("the destination read %q, %v; want %q", got, err, "ping")
	}
	tun.up.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := tun.up.Write([]byte("pong")); err != nil {
		t.Fatalf("the destination could not write: %v", err)
	}
	if d := tun.c.until(http2.FrameData, 1).(*http2.DataFrame); string(d.Data()) != "pong" {
		t.Fatalf("the source read %q, want %q", d.Data(), "pong")
	}
}
