package nodeproxy

import (
	"net/netip"
	"testing"
)

func TestAddressLike(t *testing.T) {
	v4, v6 := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")
	for _, tc := range []struct {
		name    string
		ips     []netip.Addr
		dialled netip.Addr
		want    netip.Addr
		ok      bool
	}{
		{"IPv6 VIP, dual-stack workload listed IPv4 first", []netip.Addr{v4, v6}, netip.MustParseAddr("fd00:96::1"), v6, true},
		{"IPv4 VIP, dual-stack workload listed IPv6 first", []netip.Addr{v6, v4}, netip.MustParseAddr("10.96.0.1"), v4, true},
		{"IPv6 VIP, IPv4-only workload", []netip.Addr{v4}, netip.MustParseAddr("fd00:96::1"), v4, true},
		{"no address", nil, netip.MustParseAddr("10.96.0.1"), netip.Addr{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := addressLike(tc.ips, tc.dialled)
			if got != tc.want || ok != tc.ok {
				t.Errorf("addressLike = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
