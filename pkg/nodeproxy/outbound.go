package nodeproxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/meshpilot/meshpilot/pkg/hbone"
	"github.com/meshpilot/meshpilot/pkg/netns"
	"github.com/meshpilot/meshpilot/pkg/origdst"
	"github.com/meshpilot/meshpilot/pkg/workloadapi"
)

// accept serves one of the workload's capture listeners.
func (lw *localWorkload) accept(l net.Listener, serve func(net.Conn)) {
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if hbone.AcceptWillRecover(err) {
				// The listener stays open whatever we do: the workload's
				// connections would wait in its backlog for good.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				lw.p.log.Warn("accept failed; retrying", "workload", lw.name(), "listener", l.Addr().String(), "err", err, "retry", delay)
				time.Sleep(delay)
				continue
			}
			lw.p.log.Error("accept failed; this capture of the workload stops", "workload", lw.name(), "listener", l.Addr().String(), "err", err)
			return
		}
		delay = 0
		go serve(c)
	}
}

// servePlaintextInbound passes a connection that reached the workload
// without HBONE (a client outside the mesh) on to the workload, and only
// to it: no policy refuses plaintext yet, as under PERMISSIVE.
func (lw *localWorkload) servePlaintextInbound(c net.Conn) {
	if !lw.track(c) {
		c.Close()
		return
	}
	defer lw.untrack(c)
	defer c.Close()
	orig, err := origdst.Lookup(c)
	if err != nil || !lw.owns(orig.Addr()) {
		lw.p.log.Warn("plaintext inbound connection refused", "workload", lw.name(), "dest", orig.String(), "err", err)
		lw.p.m.refused(hbone.Inbound, "plaintext-destination")
		return
	}
	// pod_ip:15006 (or :15001) itself: the marked dial would pass the
	// capture, arrive here again with the same original destination, and
	// repeat until file descriptors ran out.
	if lw.loops(orig, c) {
		lw.refuseLoop(hbone.Inbound, orig, c.RemoteAddr())
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	up, err := netns.Dial(ctx, lw.netns, orig, markedDialer())
	cancel()
	if err != nil {
		lw.p.m.refused(hbone.Inbound, string(hbone.ReasonDial))
		return
	}
	if !lw.track(up) {
		up.Close()
		return
	}
	defer lw.untrack(up)
	pipe(c, up)
}

// route is where one outbound connection goes.
type route struct {
	dest netip.AddrPort
	// target is the workload reached, nil for a destination outside the
	// mesh (passed through as plain TCP).
	target *workloadapi.Workload
}

// serveOutbound sends one captured connection on: to an HBONE workload
// through a tunnel under this workload's certificate, to any other
// destination (a workload without HBONE, or outside the mesh) as plain
// TCP from the workload's namespace.
func (lw *localWorkload) serveOutbound(c net.Conn) {
	if !lw.track(c) {
		c.Close()
		return
	}
	defer lw.untrack(c)
	defer c.Close()
	orig, err := origdst.Lookup(c)
	if err != nil {
		lw.p.log.Warn("outbound connection without an original destination", "workload", lw.name(), "err", err)
		lw.p.m.refused(hbone.Outbound, "original-destination")
		return
	}
	r := lw.p.resolve(lw.w(), orig)
	// A direct connect to :15001 (from loopback or the pod's own address,
	// which the capture exempts) reads back as itself; a VIP may resolve
	// to one of the proxy's ports. Either would be dialled back to the
	// proxy, which would forward it again.
	if lw.loops(r.dest, c) {
		lw.refuseLoop(hbone.Outbound, r.dest, c.RemoteAddr())
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	up, err := lw.dialRoute(ctx, r)
	cancel()
	if err != nil {
		lw.p.log.Warn("outbound connection refused", "workload", lw.name(), "dest", r.dest.String(), "err", err)
		return
	}
	if !lw.track(up) {
		up.Close()
		return
	}
	defer lw.untrack(up)
	pipe(c, up)
}

func (lw *localWorkload) dialRoute(ctx context.Context, r route) (net.Conn, error) {
	if r.target == nil || r.target.GetTunnelProtocol() != workloadapi.TunnelProtocol_HBONE {
		lw.p.m.passthrough.Inc()
		return netns.Dial(ctx, lw.netns, r.dest, markedDialer())
	}
	src, err := lw.p.certs.await(ctx, identity(lw.w()))
	if err != nil {
		lw.p.m.refused(hbone.Outbound, "no-certificate")
		return nil, err
	}
	return lw.dialer.Dial(ctx, src, hbone.Target{
		// In-pod mode: the destination's node proxy listens on :15008 in
		// the destination's own namespace, so the tunnel goes to its IP.
		Node:     netip.AddrPortFrom(r.dest.Addr(), HBONEPort),
		Dest:     r.dest,
		Identity: identity(r.target),
	})
}

// next spreads connections to a service over its endpoints.
var next atomic.Uint64

// resolve finds where a connection from src to orig leads: a service VIP
// becomes one of its workloads for src (on the target port it serves the
// service port on), a workload address that workload, anything else
// itself.
func (p *Proxy) resolve(src *workloadapi.Workload, orig netip.AddrPort) route {
	if svc := p.dir.ServiceByVIP(orig.Addr()); svc != nil {
		eps := p.dir.Endpoints(src, svc, uint32(orig.Port()))
		if len(eps) == 0 {
			return route{dest: orig}
		}
		ep := eps[next.Add(1)%uint64(len(eps))]
		ip, ok := addressLike(workloadIPs(ep.Workload), orig.Addr())
		if !ok {
			return route{dest: orig}
		}
		return route{dest: netip.AddrPortFrom(ip, uint16(ep.Port)), target: ep.Workload}
	}
	if w := p.dir.WorkloadByIP(orig.Addr()); w != nil {
		return route{dest: orig, target: w}
	}
	return route{dest: orig}
}

// addressLike picks, of a dual-stack workload's addresses, one of the
// family the application dialled (its Service's IPv6 VIP, say), as
// ztunnel does: the application chose that family, and the path to the
// other may not exist. A workload with none of that family is reached on
// its first address.
func addressLike(ips []netip.Addr, dialled netip.Addr) (netip.Addr, bool) {
	for _, ip := range ips {
		if ip.Is4() == dialled.Is4() {
			return ip, true
		}
	}
	if len(ips) == 0 {
		return netip.Addr{}, false
	}
	return ips[0], true
}
