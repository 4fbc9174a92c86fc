package capture

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/netnstest"
	"github.com/meshpilot/meshpilot/pkg/netns"
	"github.com/meshpilot/meshpilot/pkg/origdst"
)

var ports = Ports{Outbound: 15001, Inbound: 15006, HBONE: 15008, Mark: 0x539}

func TestInstallRemove(t *testing.T) {
	for _, tc := range []struct {
		backend Backend
		// rules counts the capture's rules in a namespace, read with the
		// backend's own tool, not through the backend.
		rules     func(t *testing.T, path string) int
		wantRules int
		why       string
	}{
		{NFTables, nftRules, 2 * (3 + 4), "7 per family (3 outbound, 4 inbound)"},
		{IPTables, iptRules, 2 * (2 + 3 + 4), "9 per family (2 jumps, 3 outbound, 4 inbound)"},
	} {
		t.Run(tc.backend.Name(), func(t *testing.T) {
			testInstallRemove(t, tc.backend, func(path string) {
				if n := tc.rules(t, path); n != tc.wantRules {
					t.Errorf("%d rules, want %s: a second Install duplicated or lost rules", n, tc.why)
				}
			})
		})
	}
}

func testInstallRemove(t *testing.T, b Backend, checkRules func(path string)) {
	pod, peer := netnstest.Pair(t)
	for i := range 2 { // installing again replaces, never duplicates
		if err := b.Install(pod.Path, ports); err != nil {
			t.Fatalf("install #%d: %v", i+1, err)
		}
	}
	if ok, err := b.Installed(pod.Path); err != nil || !ok {
		t.Fatalf("Installed = %v, %v after Install", ok, err)
	}
	checkRules(pod.Path)
	if ok, _ := b.Installed(peer.Path); ok {
		t.Error("the rules reached another namespace")
	}
	if ok, _ := b.Installed("/proc/self/ns/net"); ok {
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
		if err := b.Remove(pod.Path); err != nil {
			t.Fatalf("remove #%d: %v", i+1, err)
		}
	}
	if ok, err := b.Installed(pod.Path); err != nil || ok {
		t.Errorf("Installed = %v, %v after Remove", ok, err)
	}
	if n := iptRules(t, pod.Path) + nftRules(t, pod.Path); n != 0 {
		t.Errorf("%d capture rules left after Remove", n)
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

func nftRules(t *testing.T, path string) int {
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

// iptRules counts the lines of iptables-save and ip6tables-save, run in
// the namespace, that add a rule to or jump to a capture chain.
func iptRules(t *testing.T, path string) int {
	t.Helper()
	n := 0
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		var out []byte
		err := netns.Do(path, func() (err error) {
			out, err = exec.Command(save, "-t", "nat").Output()
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v", save, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "-A ") && strings.Contains(line, "MESHPILOT_") {
				n++
			}
		}
	}
	return n
}
