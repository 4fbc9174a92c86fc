package nodeproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/meshpilot/meshpilot/internal/netnstest"
	"github.com/meshpilot/meshpilot/pkg/netns"
)

// countSelfDials counts, in the namespace at path, the TCP packets that
// carry the proxy's mark to one of its own ports (15001-15008): none
// should ever be sent.
func countSelfDials(t *testing.T, path string) func(*testing.T) uint64 {
	t.Helper()
	c := netnstest.NFTables(t, path)
	table := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "meshpilot_loop_test"})
	chain := c.AddChain(&nftables.Chain{Name: "output", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter})
	c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(SocketMark)},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: binaryutil.BigEndian.PutUint16(OutboundPort),
			ToData: binaryutil.BigEndian.PutUint16(HBONEPort)},
		&expr.Counter{},
	}})
	if err := c.Flush(); err != nil {
		t.Fatalf("nftables: %v", err)
	}
	return func(t *testing.T) uint64 {
		t.Helper()
		rules, err := c.GetRules(table, chain)
		if err != nil || len(rules) != 1 {
			t.Fatalf("reading the counter: %d rules, %v", len(rules), err)
		}
		for _, e := range rules[0].Exprs {
			if ctr, ok := e.(*expr.Counter); ok {
				return ctr.Packets
			}
		}
		t.Fatal("the counter rule has no counter")
		return 0
	}
}

// expectClosed sends on c and waits up to 2 s for the proxy to close it,
// failing at once if the proxy has dialled one of its own ports since the
// count was before (an unfixed proxy loops, and c stays open).
func expectClosed(t *testing.T, c net.Conn, selfDials func(*testing.T) uint64, before uint64) {
	t.Helper()
	defer c.Close()
	_, _ = c.Write([]byte("hello"))
	buf := make([]byte, 64)
	for end := time.Now().Add(2 * time.Second); ; {
		if n := selfDials(t) - before; n != 0 {
			t.Fatalf("the proxy dialled its own ports (%d packets): a loop", n)
		}
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		n, err := c.Read(buf)
		var ne net.Error
		switch {
		case n > 0:
			t.Fatalf("got %q back, want the connection refused", buf[:n])
		case err != nil && !(errors.As(err, &ne) && ne.Timeout()):
			return // EOF or reset: refused
		case time.Now().After(end):
			t.Fatal("the connection is still open after 2 s")
		}
	}
}

func dialIn(t *testing.T, ns string, dest netip.AddrPort) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := netns.Dial(ctx, ns, dest, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// roundTrip sends "hello" to dest from the namespace at ns, half-closes,
// and returns the reply.
func roundTrip(t *testing.T, ns string, dest netip.AddrPort) string {
	t.Helper()
	c := dialIn(t, ns, dest)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// echo serves an echo server at addr in the namespace at path: the
// workload's application.
func echo(t *testing.T, path string, addr netip.AddrPort) {
	t.Helper()
	l, err := netns.Listen(path, addr, nil)
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
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
}

// noConn stands for the control plane: the test never starts WDS or asks
// the CA.
type noConn struct{}

func (noConn) Invoke(context.Context, string, any, any, ...grpc.CallOption) error {
	return errors.New("no control plane in this test")
}

func (noConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, errors.New("no control plane in this test")
}
