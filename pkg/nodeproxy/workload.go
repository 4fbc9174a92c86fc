package nodeproxy

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/meshpilot/meshpilot/pkg/hbone"
	"github.com/meshpilot/meshpilot/pkg/netns"
	"github.com/meshpilot/meshpilot/pkg/workloadapi"
)

// localWorkload is one ambient workload on the node, served in its own
// network namespace as ztunnel's in-pod mode does: an HBONE listener on
// :15008 that presents its certificate, the capture of its outbound
// connections on :15001, tunnelled under its certificate, and of the
// plaintext ones reaching it on :15006.
type localWorkload struct {
	p *Proxy
	// current is the workload as last known: reconcile replaces it (WDS's
	// version supersedes the agent's record) while connections read it.
	current atomic.Pointer[workloadapi.Workload]
	netns   string

	inbound           *hbone.Server
	inL, outL, plainL net.Listener
	dialer            *hbone.Dialer

	mu       sync.Mutex
	outbound map[net.Conn]struct{}
	done     chan struct{}

	// loopWarned is when a loop was last warned of (Unix ns), see
	// refuseLoop.
	loopWarned atomic.Int64
}

func (lw *localWorkload) w() *workloadapi.Workload { return lw.current.Load() }

func (lw *localWorkload) name() string { w := lw.w(); return w.GetNamespace() + "/" + w.GetName() }

// markedDialer opens the proxy's own sockets in the workload's namespace,
// marked so that the capture lets them out.
func markedDialer() *net.Dialer {
	return &net.Dialer{Timeout: 5 * time.Second, Control: markSocket}
}

func markSocket(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_MARK, SocketMark)
	}); err != nil {
		return err
	}
	return serr
}

// startWorkload opens w's listeners in the namespace at path; an empty
// path is looked up with Options.PodNetns.
func (p *Proxy) startWorkload(w *workloadapi.Workload, path string) (*localWorkload, error) {
	var err error
	if path == "" {
		if path, err = p.opts.PodNetns(w.GetNamespace(), w.GetName()); err != nil {
			return nil, errorf("network namespace of %s/%s: %w", w.GetNamespace(), w.GetName(), err)
		}
	}
	lw := &localWorkload{p: p, netns: path, outbound: map[net.Conn]struct{}{}, done: make(chan struct{})}
	lw.current.Store(w)
	log := p.log.With("workload", lw.name())
	lw.inbound, err = hbone.NewServer(hbone.ServerConfig{
		Certificate: lw.serverCertificate,
		Roots:       p.certs.rootPool,
		Authorize:   lw.authorize,
		Dial: func(ctx context.Context, dest netip.AddrPort) (net.Conn, error) {
			return netns.Dial(ctx, lw.netns, dest, markedDialer())
		},
		Metrics: p.hboneMetrics(),
		Log:     log,
	})
	if err != nil {
		return nil, err
	}
	lw.dialer, err = hbone.NewDialer(hbone.DialerConfig{
		Roots: p.certs.rootPool,
		NetDial: func(ctx context.Context, node netip.AddrPort) (net.Conn, error) {
			return netns.Dial(ctx, lw.netns, node, markedDialer())
		},
		Metrics: p.hboneMetrics(),
		Log:     log,
	})
	if err != nil {
		return nil, err
	}
	any4 := netip.AddrFrom4([4]byte{})
	if lw.inL, err = netns.Listen(path, netip.AddrPortFrom(any4, HBONEPort), nil); err != nil {
		return nil, errorf("listen on :%d in %s: %w", HBONEPort, path, err)
	}
	if lw.outL, err = netns.Listen(path, netip.AddrPortFrom(any4, OutboundPort), nil); err != nil {
		lw.inL.Close()
		return nil, errorf("listen on :%d in %s: %w", OutboundPort, path, err)
	}
	if lw.plainL, err = netns.Listen(path, netip.AddrPortFrom(any4, InboundPlaintextPort), nil); err != nil {
		lw.inL.Close()
		lw.outL.Close()
		return nil, errorf("listen on :%d in %s: %w", InboundPlaintextPort, path, err)
	}
	go func() { _ = lw.inbound.Serve(lw.inL) }()
	go lw.accept(lw.outL, lw.serveOutbound)
	go lw.accept(lw.plainL, lw.servePlaintextInbound)
	log.Info("serving workload", "netns", path, "identity", identity(w))
	return lw, nil
}

// serverCertificate presents the certificate of the workload that owns
// the address the tunnel was sent to: this workload's, or none.
func (lw *localWorkload) serverCertificate(ctx context.Context, local netip.AddrPort) (*tls.Certificate, error) {
	if !lw.owns(local.Addr()) {
		return nil, errorf("%s is not %s's address", local.Addr(), lw.name())
	}
	return lw.p.certs.await(ctx, identity(lw.w()))
}

// authorize lets a tunnel through only to this workload's own addresses,
// and never to the proxy's own ports there: a CONNECT to pod_ip:15001
// would come back to the proxy as an outbound connection and be tunnelled
// here again, without end. Anything refused is refused before it is
// dialled; the HBONE server counts and logs the refusal (as "policy").
func (lw *localWorkload) authorize(_ context.Context, s hbone.StreamInfo) error {
	if !lw.owns(s.Dest.Addr()) {
		return errorf("%s is not an address of %s", s.Dest.Addr(), lw.name())
	}
	if lw.loops(s.Dest, nil) {
		return errorf("%s is the node proxy's own listener: a loop", s.Dest)
	}
	lw.p.log.Info("inbound tunnel", "peer", s.Peer, "workload", lw.name(), "dest", s.Dest.String())
	return nil
}

func (lw *localWorkload) owns(ip netip.Addr) bool {
	for _, a := range workloadIPs(lw.w()) {
		if a == ip.Unmap() {
			return true
		}
	}
	return false
}

// close stops serving the workload at once: its listeners, its inbound
// tunnels and its outbound connections.
func (lw *localWorkload) close() {
	lw.stopListening()
	lw.inbound.Close()
	lw.dialer.Close()
	lw.mu.Lock()
	for c := range lw.outbound {
		c.Close()
	}
	lw.mu.Unlock()
}

func (lw *localWorkload) stopListening() {
	select {
	case <-lw.done:
	default:
		close(lw.done)
	}
	lw.inL.Close()
	lw.outL.Close()
	lw.plainL.Close()
}

// drain stops accepting and lets open tunnels finish until ctx ends.
func (lw *localWorkload) drain(ctx context.Context) {
	lw.stopListening()
	_ = lw.inbound.Shutdown(ctx)
	for {
		lw.mu.Lock()
		n := len(lw.outbound)
		lw.mu.Unlock()
		if n == 0 || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	lw.close()
}

func (lw *localWorkload) track(c net.Conn) bool {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	select {
	case <-lw.done:
		return false
	default:
	}
	lw.outbound[c] = struct{}{}
	return true
}

func (lw *localWorkload) untrack(c net.Conn) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	delete(lw.outbound, c)
}
