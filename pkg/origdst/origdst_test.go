//go:build linux

package origdst

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/meshpilot/meshpilot/internal/netnstest"
	"github.com/meshpilot/meshpilot/pkg/netns"
)

const capturedPort = 9999

// redirect installs, in the namespace at path, the capture a node agent
// would: TCP to port 9999 from this namespace goes to the local proxyPort
// instead, for IPv4 and IPv6. It talks netlink directly, so no nft binary
// is needed.
func redirect(t *testing.T, path string, proxyPort uint16) {
	t.Helper()
	c := netnstest.NFTables(t, path)
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		table := c.AddTable(&nftables.Table{Family: fam, Name: "meshpilot_test"})
		chain := c.AddChain(&nftables.Chain{
			Name: "output", Table: table, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest,
		})
		c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(capturedPort)},
			&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(proxyPort)},
			&expr.Redir{RegisterProtoMin: 1},
		}})
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("nftables: %v", err)
	}
}

func TestLookup(t *testing.T) {
	ns, _ := netnstest.Pair(t)
	// One dual-stack listener, as a proxy's capture port is.
	l, err := netns.Listen(ns.Path, netip.AddrPortFrom(netip.IPv6Unspecified(), 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	proxyPort := uint16(l.Addr().(*net.TCPAddr).Port)
	redirect(t, ns.Path, proxyPort)

	cases := []struct {
		name string
		dial string
		want string
	}{
		{name: "ipv4 redirected", dial: "127.0.0.2:9999", want: "127.0.0.2:9999"},
		{name: "ipv4 to the namespace's own address", dial: netip.AddrPortFrom(ns.IP, capturedPort).String(), want: netip.AddrPortFrom(ns.IP, capturedPort).String()},
		{name: "ipv6 redirected", dial: "[::1]:9999", want: "[::1]:9999"},
		// Tracked but not rewritten: the destination is the proxy itself.
		{name: "not redirected", dial: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), proxyPort).String(), want: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), proxyPort).String()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := netns.Dial(ctx, ns.Path, netip.MustParseAddrPort(tc.dial), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			l.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
			accepted, err := l.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer accepted.Close()
			// The accepted socket's own address is the proxy's; only
			// conntrack knows where the client meant to go.
			if got := netip.MustParseAddrPort(accepted.LocalAddr().String()).Port(); got != proxyPort {
				t.Fatalf("accepted on port %d, want the proxy's %d", got, proxyPort)
			}
			got, err := Lookup(accepted)
			if err != nil || got.String() != tc.want {
				t.Errorf("Lookup = %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

// In a namespace without NAT rules conntrack keeps no entry, and Lookup
// says so rather than inventing an answer.
func TestLookupUntracked(t *testing.T) {
	_, ns := netnstest.Pair(t)
	l, err := netns.Listen(ns.Path, netip.AddrPortFrom(ns.IP, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := netns.Dial(ctx, ns.Path, netip.MustParseAddrPort(l.Addr().String()), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	accepted, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer accepted.Close()
	if got, err := Lookup(accepted); err == nil {
		t.Errorf("Lookup = %v without conntrack", got)
	} else {
		t.Logf("untracked: %v", err)
	}
	// A connection that is not a socket at all.
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, err := Lookup(a); err == nil {
		t.Errorf("Lookup of a pipe succeeded")
	}
}
