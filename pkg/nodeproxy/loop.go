package nodeproxy

import (
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/meshpilot/meshpilot/pkg/hbone"
)

// listenerPorts are every port the proxy listens on in a workload's
// namespace (startWorkload), on all of its addresses. Its health, metrics
// and debug ports are in the proxy's own namespace, which no dial from a
// workload's namespace reaches at a workload or loopback address.
var listenerPorts = [...]uint16{OutboundPort, InboundPlaintextPort, HBONEPort}

// reasonLoop labels refusals of a destination that is the proxy itself.
const reasonLoop = "loop"

// loopLogEvery spaces the warnings about loops: anyone who can reach a
// workload can ask for one, so each is counted but not each is logged.
const loopLogEvery = 10 * time.Second

// isProxyAddr reports whether dialling dest from a workload's namespace
// would reach one of the proxy's own listeners there: a listener port at
// an address of that namespace (local: the workload's own, and the
// address a connection arrived at) or at loopback or the unspecified
// address, which also lead to it. The proxy's marked sockets pass the
// capture, and conntrack then reads the same destination back on the
// accepted connection, so forwarding it would dial again, without end.
func isProxyAddr(dest netip.AddrPort, local []netip.Addr) bool {
	if !slices.Contains(listenerPorts[:], dest.Port()) {
		return false
	}
	ip := dest.Addr().Unmap()
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	return slices.ContainsFunc(local, func(a netip.Addr) bool { return a.Unmap() == ip })
}

// loops reports whether dest, read from (or resolved for) a connection
// accepted on c (nil: none), is the proxy itself in lw's namespace.
func (lw *localWorkload) loops(dest netip.AddrPort, c net.Conn) bool {
	local := workloadIPs(lw.w())
	if c != nil {
		if a, err := netip.ParseAddrPort(c.LocalAddr().String()); err == nil {
			local = append(local, a.Addr())
		}
	}
	return isProxyAddr(dest, local)
}

// refuseLoop counts a connection refused because its destination is the
// proxy, and warns at most once per loopLogEvery per workload (the rest at
// debug level).
func (lw *localWorkload) refuseLoop(d hbone.Direction, dest netip.AddrPort, remote net.Addr) {
	lw.p.m.refused(d, reasonLoop)
	msg, args := "connection to the node proxy's own port refused", []any{
		"workload", lw.name(), "direction", d.String(), "dest", dest.String(), "src", remote.String()}
	now, last := time.Now().UnixNano(), lw.loopWarned.Load()
	if now-last < int64(loopLogEvery) || !lw.loopWarned.CompareAndSwap(last, now) {
		lw.p.log.Debug(msg, args...)
		return
	}
	lw.p.log.Warn(msg, args...)
}
