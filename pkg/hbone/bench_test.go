package hbone

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/netnstest"
	"github.com/meshpilot/meshpilot/pkg/netns"
)

// The benchmarks run over a veth pair: the source in namespace a, the node
// proxy and the destination in namespace b. Plain TCP from a to the same
// destination is the baseline.
type topology struct {
	a, b     netnstest.Namespace
	m        *mesh
	srv      *Server
	node     netip.AddrPort
	sink     netip.AddrPort // reads to EOF, answers the byte count
	holder   netip.AddrPort // accepts and keeps connections, no goroutine each
	held     *heldConns
	counters *Counters
}

type heldConns struct {
	mu sync.Mutex
	cs []net.Conn
}

func newTopology(b *testing.B) *topology {
	b.Helper()
	na, nb := netnstest.Pair(b)
	tp := &topology{a: na, b: nb, m: newMesh(b), held: &heldConns{}, counters: &Counters{}}
	listen := func(port uint16) net.Listener {
		l, err := netns.Listen(nb.Path, netip.AddrPortFrom(nb.IP, port), nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		return l
	}
	sink := listen(0)
	tp.sink = netip.MustParseAddrPort(sink.Addr().String())
	go func() {
		for {
			c, err := sink.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				n, _ := io.CopyBuffer(io.Discard, c, make([]byte, 256<<10))
				binary.Write(c, binary.BigEndian, n)
			}()
		}
	}()
	holder := listen(0)
	tp.holder = netip.MustParseAddrPort(holder.Addr().String())
	go func() {
		for {
			c, err := holder.Accept()
			if err != nil {
				return
			}
			tp.held.mu.Lock()
			tp.held.cs = append(tp.held.cs, c)
			tp.held.mu.Unlock()
		}
	}()
	b.Cleanup(func() {
		tp.held.mu.Lock()
		defer tp.held.mu.Unlock()
		for _, c := range tp.held.cs {
			c.Close()
		}
	})

	srv, err := NewServer(ServerConfig{
		Certificate: func(context.Context, netip.AddrPort) (*tls.Certificate, error) { return &tp.m.b, nil },
		Roots:       tp.m.roots,
		Authorize:   func(context.Context, StreamInfo) error { return nil },
		Dial: func(ctx context.Context, dest netip.AddrPort) (net.Conn, error) {
			return netns.Dial(ctx, nb.Path, dest, nil)
		},
		Metrics: tp.counters,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	hl := listen(15008)
	go srv.Serve(hl)
	tp.srv = srv
	tp.node = netip.AddrPortFrom(nb.IP, 15008)
	return tp
}

func (tp *topology) dialer(b *testing.B) *Dialer {
	b.Helper()
	d, err := NewDialer(DialerConfig{
		Roots: tp.m.roots,
		NetDial: func(ctx context.Context, node netip.AddrPort) (net.Conn, error) {
			return netns.Dial(ctx, tp.a.Path, node, nil)
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	return d
}

func (tp *topology) plain(b *testing.B, dest netip.AddrPort) net.Conn {
	b.Helper()
	c, err := netns.Dial(context.Background(), tp.a.Path, dest, nil)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

type halfCloser interface {
	net.Conn
	CloseWrite() error
}

// BenchmarkThroughput sends one long stream; compare MB/s of tcp and hbone.
// tcp-relay and tls-relay are the floors described in bench_floor_test.go.
func BenchmarkThroughput(b *testing.B) {
	tp := newTopology(b)
	d := tp.dialer(b)
	run := func(b *testing.B, open func() halfCloser) {
		c := open()
		defer c.Close()
		buf := make([]byte, 1<<20)
		b.SetBytes(int64(len(buf)))
		b.ResetTimer()
		cpu := cpuTime()
		for range b.N {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		// Count the time until the destination has it all.
		c.CloseWrite()
		var got int64
		if err := binary.Read(c, binary.BigEndian, &got); err != nil || got != int64(b.N*len(buf)) {
			b.Fatalf("destination got %d bytes (%v), want %d", got, err, b.N*len(buf))
		}
		// CPU per byte, both proxy ends and the destination together:
		// steadier than MB/s when the cores are shared.
		b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N*len(buf)), "cpu-ns/B")
	}
	b.Run("tcp", func(b *testing.B) {
		run(b, func() halfCloser { return tp.plain(b, tp.sink).(*net.TCPConn) })
	})
	tcpRelay, tlsRelay := tp.tcpRelay(b), tp.tlsRelay(b)
	b.Run("tcp-relay", func(b *testing.B) {
		run(b, func() halfCloser { return tp.plain(b, tcpRelay).(*net.TCPConn) })
	})
	b.Run("tls-relay", func(b *testing.B) {
		run(b, func() halfCloser { return tp.tlsClient(b, tlsRelay) })
	})
	b.Run("hbone", func(b *testing.B) {
		run(b, func() halfCloser {
			c, err := d.Dial(context.Background(), &tp.m.a, Target{Node: tp.node, Dest: tp.sink, Identity: idB})
			if err != nil {
				b.Fatal(err)
			}
			return c
		})
	})
}

// BenchmarkOpen measures the time to a usable connection: a TCP handshake
// for tcp; for hbone over a pooled connection, a CONNECT answered 200 after
// the node proxy's own connect to the destination. The difference is the
// added time.
func BenchmarkOpen(b *testing.B) {
	tp := newTopology(b)
	d := tp.dialer(b)
	// Warm the pool: the handshake is BenchmarkNewTunnel's business.
	if c, err := d.Dial(context.Background(), &tp.m.a, Target{Node: tp.node, Dest: tp.sink, Identity: idB}); err != nil {
		b.Fatal(err)
	} else {
		defer c.Close()
	}
	run := func(b *testing.B, open func() net.Conn) {
		lat := make([]time.Duration, 0, b.N)
		for range b.N {
			start := time.Now()
			c := open()
			lat = append(lat, time.Since(start))
			c.Close()
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	}
	b.Run("tcp", func(b *testing.B) {
		run(b, func() net.Conn { return tp.plain(b, tp.sink) })
	})
	b.Run("hbone-pooled", func(b *testing.B) {
		run(b, func() net.Conn {
			c, err := d.Dial(context.Background(), &tp.m.a, Target{Node: tp.node, Dest: tp.sink, Identity: idB})
			if err != nil {
				b.Fatal(err)
			}
			return c
		})
		if d.PoolSize() != 1 {
			b.Errorf("pool grew to %d connections", d.PoolSize())
		}
	})
}

// BenchmarkNewTunnel opens a fresh mutual-TLS connection per iteration and
// one stream on it. cpu-ms/handshake counts both ends, client and server,
// which run in this one process.
func BenchmarkNewTunnel(b *testing.B) {
	tp := newTopology(b)
	before := cpuTime()
	start := time.Now()
	for range b.N {
		d, err := NewDialer(DialerConfig{
			Roots: tp.m.roots,
			NetDial: func(ctx context.Context, node netip.AddrPort) (net.Conn, error) {
				return netns.Dial(ctx, tp.a.Path, node, nil)
			},
		})
		if err != nil {
			b.Fatal(err)
		}
		c, err := d.Dial(context.Background(), &tp.m.a, Target{Node: tp.node, Dest: tp.sink, Identity: idB})
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
		d.Close()
	}
	elapsed := time.Since(start)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tunnels/s")
	b.ReportMetric(float64((cpuTime()-before).Microseconds())/1000/float64(b.N), "cpu-ms/handshake")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkIdleStreamMemory opens idleStreams tunnels that carry nothing
// and reports the heap and stack they hold, per stream:
//   - both: the Dialer and the Server, as a node proxy holding both ends of
//     its own tunnels would;
//   - server: the Server (the node proxy's inbound end), opened by a bare
//     HTTP/2 client that keeps nothing per stream;
//   - client: the Dialer and its Conns, against a bare server.
//
// The destination's sockets are held without goroutines.
func BenchmarkIdleStreamMemory(b *testing.B) {
	const idleStreams = 1000
	tp := newTopology(b)
	measure := func(b *testing.B, open func() (conns int, closeAll func())) {
		for range b.N {
			heap0, stack0 := inUse()
			n, closeAll := open()
			heap1, stack1 := inUse()
			b.ReportMetric(float64(heap1+stack1-heap0-stack0)/idleStreams, "B/stream")
			b.ReportMetric(float64(heap1-heap0)/idleStreams, "heap-B/stream")
			b.ReportMetric(float64(stack1-stack0)/idleStreams, "stack-B/stream")
			b.ReportMetric(float64(n), "connections")
			closeAll()
		}
	}
	b.Run("both", func(b *testing.B) {
		d := tp.dialer(b)
		measure(b, func() (int, func()) {
			conns := tp.idleClientStreams(b, d, tp.node, idleStreams)
			return d.PoolSize(), func() { closeConns(conns) }
		})
	})
	b.Run("server", func(b *testing.B) {
		measure(b, func() (int, func()) {
			var cs []net.Conn
			for range idleStreams / 100 {
				cs = append(cs, tp.bareClient(b, tp.holder, 100))
			}
			if got := tp.srv.OpenStreams(); len(got) < idleStreams {
				b.Fatalf("server holds %d streams", len(got))
			}
			return len(cs), func() {
				for _, c := range cs {
					c.Close()
				}
			}
		})
	})
	b.Run("client", func(b *testing.B) {
		bare := tp.bareServer(b)
		d := tp.dialer(b)
		measure(b, func() (int, func()) {
			conns := tp.idleClientStreams(b, d, bare, idleStreams)
			return d.PoolSize(), func() { closeConns(conns) }
		})
	})
}

func closeConns(conns []*Conn) {
	for _, c := range conns {
		c.Close()
	}
}

// inUse returns the heap and goroutine stacks in use after a full GC.
func inUse() (heap, stack int64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse), int64(ms.StackInuse)
}
