package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/internal/netnstest"
)

// podNet is one pod's network namespace on the test's pod network.
type podNet struct {
	name, path string
	ip         netip.Addr
}

// podNetwork builds what a node's CNI would: a namespace per pod, all on
// one bridge (in a namespace of its own, standing for the nodes' network),
// 10.<k>.0.<10+i>/24. The bridge namespace is returned too: it reaches
// every pod, as a client outside the mesh would. Everything is deleted
// when the test ends.
func podNetwork(t *testing.T, pods int) (fabric podNet, out []podNet) {
	t.Helper()
	netnstest.RequireRoot(t)
	tag := fmt.Sprintf("%d", os.Getpid()%100000)
	k := freeSubnet(t, 100+os.Getpid()%50)
	fabric = podNet{name: "mpf" + tag, path: "/var/run/netns/mpf" + tag, ip: netip.AddrFrom4([4]byte{10, byte(k), 0, 1})}
	sh(t, "ip", "netns", "add", fabric.name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", fabric.name).Run() })
	sh(t, "ip", "-n", fabric.name, "link", "set", "lo", "up")
	sh(t, "ip", "-n", fabric.name, "link", "add", "br0", "type", "bridge")
	sh(t, "ip", "-n", fabric.name, "addr", "add", fabric.ip.String()+"/24", "dev", "br0")
	sh(t, "ip", "-n", fabric.name, "link", "set", "br0", "up")
	for i := range pods {
		p := podNet{name: fmt.Sprintf("mpp%s%d", tag, i), ip: netip.AddrFrom4([4]byte{10, byte(k), 0, byte(10 + i)})}
		p.path = "/var/run/netns/" + p.name
		sh(t, "ip", "netns", "add", p.name)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", p.name).Run() })
		host, peer := fmt.Sprintf("vh%s%d", tag, i), fmt.Sprintf("vp%s%d", tag, i)
		sh(t, "ip", "-n", fabric.name, "link", "add", host, "type", "veth", "peer", "name", peer, "netns", p.name)
		sh(t, "ip", "-n", fabric.name, "link", "set", host, "master", "br0", "up")
		sh(t, "ip", "-n", p.name, "link", "set", "lo", "up")
		sh(t, "ip", "-n", p.name, "addr", "add", p.ip.String()+"/24", "dev", peer)
		sh(t, "ip", "-n", p.name, "link", "set", peer, "up")
		// Service VIPs are reached through the capture; a default route
		// lets the kernel accept the connect before nftables redirects it.
		sh(t, "ip", "-n", p.name, "route", "add", "default", "via", fabric.ip.String())
		out = append(out, p)
	}
	return fabric, out
}

func sh(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// freeSubnet returns the first k from start on (wrapping within 100-149)
// such that no network namespace already holds an address in 10.k.0.0/24:
// another test run's pods with the same addresses would make a pod's IP
// name two namespaces.
func freeSubnet(t *testing.T, start int) int {
	t.Helper()
	out, err := exec.Command("ip", "-all", "netns", "exec", "ip", "-o", "-4", "addr", "show").CombinedOutput()
	if err != nil {
		return start // no namespace yet, or no way to tell: keep the default
	}
	for i := range 50 {
		k := 100 + (start-100+i)%50
		if !strings.Contains(string(out), fmt.Sprintf(" 10.%d.0.", k)) {
			return k
		}
	}
	return start
}
