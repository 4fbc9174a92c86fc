//go:build linux

package origdst

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Both options are 80 in the kernel's headers (linux/netfilter_ipv4.h and
// linux/netfilter_ipv6/ip6_tables.h); x/sys does not name them.
const (
	soOriginalDst     = 80
	ip6tSoOriginalDst = 80
)

// Lookup returns the original destination of an accepted connection. For a
// redirected flow that is where the client was going; for a flow that
// conntrack tracked but did not rewrite it is the socket's own local
// address, and a caller forwarding it must treat that as a loop. Where
// conntrack does not track the flow at all (a namespace with no NAT rules)
// the kernel answers ENOENT, returned as an error: never guess.
func Lookup(c net.Conn) (netip.AddrPort, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("origdst: %T has no socket", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	local, _ := netip.ParseAddrPort(c.LocalAddr().String())
	var ap netip.AddrPort
	var serr error
	cerr := raw.Control(func(fd uintptr) {
		// The family of the socket decides the option; a v4-mapped local
		// address is an IPv4 flow on an IPv6 socket, which conntrack
		// keeps as IPv4.
		if local.Addr().Is4() || local.Addr().Is4In6() {
			ap, serr = lookup4(int(fd))
			if serr == nil || !local.Addr().Is4In6() {
				return
			}
		}
		ap, serr = lookup6(int(fd))
	})
	if cerr != nil {
		return netip.AddrPort{}, cerr
	}
	if serr != nil {
		return netip.AddrPort{}, fmt.Errorf("origdst: %w", serr)
	}
	return ap, nil
}

func lookup4(fd int) (netip.AddrPort, error) {
	var sa unix.RawSockaddrInet4
	// The kernel wants exactly sizeof(struct sockaddr_in).
	if err := getsockopt(fd, unix.SOL_IP, soOriginalDst, unsafe.Pointer(&sa), unix.SizeofSockaddrInet4); err != nil {
		return netip.AddrPort{}, fmt.Errorf("SO_ORIGINAL_DST: %w", err)
	}
	if sa.Family != unix.AF_INET {
		return netip.AddrPort{}, errors.New("SO_ORIGINAL_DST: not an IPv4 address")
	}
	return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port(sa.Port)), nil
}

func lookup6(fd int) (netip.AddrPort, error) {
	var sa unix.RawSockaddrInet6
	if err := getsockopt(fd, unix.SOL_IPV6, ip6tSoOriginalDst, unsafe.Pointer(&sa), unix.SizeofSockaddrInet6); err != nil {
		return netip.AddrPort{}, fmt.Errorf("IP6T_SO_ORIGINAL_DST: %w", err)
	}
	if sa.Family != unix.AF_INET6 {
		return netip.AddrPort{}, errors.New("IP6T_SO_ORIGINAL_DST: not an IPv6 address")
	}
	return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), port(sa.Port)), nil
}

// port converts sin_port, which holds network byte order in memory.
func port(p uint16) uint16 {
	var b [2]byte
	*(*uint16)(unsafe.Pointer(&b[0])) = p
	return binary.BigEndian.Uint16(b[:])
}

// getsockopt is the raw call: x/sys has no getter for a sockaddr result.
func getsockopt(fd, level, opt int, val unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(val), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return nil
}
