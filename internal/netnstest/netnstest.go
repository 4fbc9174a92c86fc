package netnstest

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/nftables"
)

// Namespace is one end of a Pair.
type Namespace struct {
	Name string     // for ip netns exec
	Path string     // for setns
	IP   netip.Addr // its veth address
}

// RequireRoot skips a test that needs root when it is not root, saying why.
// Under CI (CI set) a test fails instead: CI runs as root, so a skip there
// would hide a broken setup. Benchmarks always skip, since make bench must
// pass wherever it runs.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if _, bench := t.(*testing.B); !bench && os.Getenv("CI") != "" {
		t.Fatal("CI must run as root: this test creates network namespaces")
	}
	t.Skip("not root: creating network namespaces needs CAP_SYS_ADMIN and CAP_NET_ADMIN")
}

var seq atomic.Int32

// Pair creates two namespaces joined by a veth pair, 10.<n>.0.1/24 and
// 10.<n>.0.2/24, with loopback up in each. Both are deleted when the test
// ends, pass or fail.
func Pair(t testing.TB) (a, b Namespace) {
	t.Helper()
	RequireRoot(t)
	n := seq.Add(1)
	// Short names: interface names are limited to 15 bytes.
	tag := fmt.Sprintf("%d%d", os.Getpid()%100000, n)
	a = Namespace{Name: "mpa" + tag, IP: netip.AddrFrom4([4]byte{10, byte(200 + n%50), 0, 1})}
	b = Namespace{Name: "mpb" + tag, IP: netip.AddrFrom4([4]byte{10, byte(200 + n%50), 0, 2})}
	a.Path, b.Path = "/var/run/netns/"+a.Name, "/var/run/netns/"+b.Name
	vethA, vethB := "va"+tag, "vb"+tag

	for _, ns := range []Namespace{a, b} {
		run(t, "ip", "netns", "add", ns.Name)
		t.Cleanup(func() { exec.Command("ip", "netns", "delete", ns.Name).Run() })
	}
	run(t, "ip", "link", "add", vethA, "netns", a.Name, "type", "veth", "peer", "name", vethB, "netns", b.Name)
	for _, e := range []struct {
		ns   Namespace
		veth string
	}{{a, vethA}, {b, vethB}} {
		run(t, "ip", "-n", e.ns.Name, "link", "set", "lo", "up")
		run(t, "ip", "-n", e.ns.Name, "addr", "add", e.ns.IP.String()+"/24", "dev", e.veth)
		run(t, "ip", "-n", e.ns.Name, "link", "set", e.veth, "up")
	}
	return a, b
}

func run(t testing.TB, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// NFTables is a netlink connection to nftables in the namespace at path
// (no nft binary needed); the namespace's file stays open until the test
// ends.
func NFTables(t testing.TB, path string) *nftables.Conn {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
