package capture

import (
	"context"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/netnstest"
	"github.com/meshpilot/meshpilot/pkg/netns"
	"github.com/meshpilot/meshpilot/pkg/origdst"
)

var ports = Ports{Outbound: 15001, Inbound: 15006, HBONE: 15008, Mark: 0x539}

func TestInstallRemove(t *testing.T) {
	pod, peer := netnstest.Pair(t)
	for i := range 2 { // installing again replaces, never duplicates
		if err := Install(pod.Path, ports); err != nil {
			t.Fatalf("install #%d: %v", i+1, err)
		}
	}
	if ok, err := Installed(pod.Path); err != nil || !ok {
		t.Fatalf("Installed = %v, %v after Install", ok, err)
	}
	if n := rules(t, pod.Path); n != 2*(3+4) {
		t.Errorf("%d rules, want 7 per family (3 outbound, 4 inbound): a second Install duplicated or lost rules", n)
	}
	if ok, _ := Installed(peer.Path); ok {
		t.Error("the rules reached another namespace")
	}
	if ok, _ := Installed("/proc/self/ns/net"); ok {
		t.Error("the rules reached the test's own namespace")
	}

	t.Run("outbound TCP goes to 15001, with its original destination", func(t *testing.T) {
		l := listen(t, pod.Path, ports.Outbound)
		dst := netip.AddrPortFrom(peer.IP, 80)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if c, err := netns.Dial(ctx, pod.Path, dst, nil); err == nil {
				defer c.Close()
				time.Sleep(500 * time.Millisecond)
			}
		}()
		c := accept(t, l)
		defer c.Close()
		if got, err := origdst.Lookup(c); err != nil || got != dst {
			t.Errorf("original destination %v, %v; want %v", got, err, dst)
		}
	})
	t.Run("inbound plaintext goes to 15006, HBONE to 15008 untouched", func(t *testing.T) {
		plain, hbone := listen(t, pod.Path, ports.Inbound), listen(t, pod.Path, ports.HBONE)
		for _, tc := range []struct {
			port uint16
			l    net.Listener
		}{{8080, plain}, {ports.HBONE, hbone}} {
			dst := netip.AddrPortFrom(pod.IP, tc.port)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if c, err := netns.Dial(ctx, peer.Path, dst, nil); err == nil {
					defer c.Close()
					time.Sleep(500 * time.Millisecond)
				}
			}()
			c := accept(t, tc.l)
			c.Close()
		}
	})
	t.Run("the node proxy's marked sockets pass", func(t *testing.T) {
		target := listen(t, peer.Path, 9090)
		d := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			_ = rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_MARK, int(ports.Mark))
			})
			return serr
		}}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if c, err := netns.Dial(ctx, pod.Path, netip.AddrPortFrom(peer.IP, 9090), d); err == nil {
				defer c.Close()
				time.Sleep(500 * time.Millisecond)
			}
		}()
		accept(t, target).Close()
	})

	for i := range 2 { // removing twice is fine: CNI DEL may repeat
		if err := Remove(pod.Path); err != nil {
			t.Fatalf("remove #%d: %v", i+1, err)
		}
	}
	if ok, err := Installed(pod.Path); err != nil || ok {
		t.Errorf("Installed = %v, %v after Remove", ok, err)
	}
}

func listen(t *testing.T, path string, port uint16) net.Listener {
	t.Helper()
	l, err := netns.Listen(path, netip.AddrPortFrom(netip.IPv4Unspecified(), port), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func accept(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	_ = l.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("nothing arrived at %s: %v", l.Addr(), err)
	}
	return c
}

func rules(t *testing.T, path string) int {
	t.Helper()
	c, done, err := conn(path)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	tables, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tb := range tables {
		if tb.Name != Table {
			continue
		}
		chains, err := c.ListChainsOfTableFamily(tb.Family)
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range chains {
			if ch.Table.Name != Table {
				continue
			}
			rs, err := c.GetRules(tb, ch)
			if err != nil {
				t.Fatal(err)
			}
			n += len(rs)
		}
	}
	return n
}
