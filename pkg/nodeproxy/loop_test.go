package nodeproxy

import (
	"net/netip"
	"testing"
)

func TestIsProxyAddr(t *testing.T) {
	pod := netip.MustParseAddr("10.0.0.5")
	local := []netip.Addr{pod, netip.MustParseAddr("fd00::5")}
	for _, tc := range []struct {
		dest string
		want bool
	}{
		// Each of the proxy's ports at the pod's own addresses.
		{"10.0.0.5:15001", true},
		{"10.0.0.5:15006", true},
		{"10.0.0.5:15008", true},
		{"[fd00::5]:15006", true},
		{"[::ffff:10.0.0.5]:15001", true}, // v4-mapped is the same address
		// Addresses that reach the namespace's listeners whoever owns it.
		{"127.0.0.1:15001", true},
		{"127.0.0.53:15006", true},
		{"[::1]:15008", true},
		{"0.0.0.0:15006", true},
		{"[::]:15001", true},
		// The pod's own application ports are its to serve.
		{"10.0.0.5:8080", false},
		{"127.0.0.1:8080", false},
		{"10.0.0.5:15007", false},
		{"10.0.0.5:15020", false}, // the proxy's HTTP port is in its own namespace
		// Another workload's proxy ports are that proxy's concern.
		{"10.0.0.6:15001", false},
		{"10.0.0.6:15008", false},
		{"[fd00::6]:15006", false},
	} {
		if got := isProxyAddr(netip.MustParseAddrPort(tc.dest), local); got != tc.want {
			t.Errorf("isProxyAddr(%s) = %v, want %v", tc.dest, got, tc.want)
		}
	}
	// Without local addresses only loopback and unspecified count.
	if isProxyAddr(netip.MustParseAddrPort("10.0.0.5:15006"), nil) {
		t.Error("a workload address counted without being local")
	}
}
