package hbone

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// StreamInfo describes one CONNECT request, for the policy callback and logs.
type StreamInfo struct {
	// Peer is the SPIFFE ID of the verified client certificate.
	Peer string
	// Local is the address the TLS connection arrived at: the original
	// destination when traffic was redirected to the proxy.
	Local netip.AddrPort
	// Remote is the address of the tunnel's sender (the source node).
	Remote netip.AddrPort
	// Dest is the :authority, the application connection's destination.
	Dest netip.AddrPort
}

// ServerConfig is what a Server needs from its caller. Certificate and Roots
// are required.
type ServerConfig struct {
	// Certificate picks the certificate to serve on a connection by the
	// connection's local address. A node proxy answers with the certificate
	// of the workload that owns that address; an error fails the handshake.
	// ctx is the handshake's: a certificate still on its way may be waited
	// for until it ends.
	Certificate func(ctx context.Context, local netip.AddrPort) (*tls.Certificate, error)
	// Roots returns the mesh roots that client certificates must chain to.
	// It is called per handshake, so a rotated root takes effect at once;
	// while it returns nil every handshake is refused.
	Roots func() *x509.CertPool
	// Authorize decides whether a stream may reach its destination. An
	// error refuses it with 403 and nothing is dialled. Nil allows all,
	// which only a test should want.
	Authorize func(ctx context.Context, s StreamInfo) error
	// Dial connects to an allowed destination. Nil uses a net.Dialer with a
	// 5 s timeout.
	Dial func(ctx context.Context, dest netip.AddrPort) (net.Conn, error)
	// Metrics receives counts; nil drops them.
	Metrics Metrics
	// Log receives one line per tunnel and per refusal; nil discards.
	Log *slog.Logger
	// HandshakeTimeout bounds the TLS handshake; zero means 10 s.
	HandshakeTimeout time.Duration
	// MaxConcurrentStreams per HTTP/2 connection; zero means 100, as
	// ztunnel uses, so a dialer spreads a crowd over several connections.
	MaxConcurrentStreams uint32
	// IdleTimeout closes a connection that has had no stream this long,
	// with a GOAWAY first; zero means 5 minutes, longer than a Dialer keeps
	// an idle connection (60 s), so that clients normally close first.
	IdleTimeout time.Duration
	// WriteTimeout bounds each write to a connection. A peer that stops
	// reading would otherwise block the connection's writer, and with it
	// every stream and the replies to its own SETTINGS and PINGs, for
	// good; past this, the connection and its streams are closed. Zero
	// means 30 s.
	WriteTimeout time.Duration
}

// Server terminates HBONE tunnels. It is safe for concurrent use.
type Server struct {
	cfg ServerConfig
	log *slog.Logger
	m   Metrics

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	h2conns   map[*h2conn]struct{} // for GOAWAY on Shutdown
	streams   map[netip.Addr]map[*stream]struct{}
	draining  bool // Shutdown or Close: accept nothing new
	closed    bool // Close: no new streams either
	connWG    sync.WaitGroup
}

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("hbone: server closed")

// NewServer checks the config and fills its defaults.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Certificate == nil || cfg.Roots == nil {
		return nil, errors.New("hbone: ServerConfig needs Certificate and Roots")
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: 5 * time.Second}
		cfg.Dial = func(ctx context.Context, dest netip.AddrPort) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", dest.String())
		}
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	if cfg.MaxConcurrentStreams == 0 {
		cfg.MaxConcurrentStreams = 100
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 5 * time.Minute
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	s := &Server{
		cfg:       cfg,
		log:       cfg.Log,
		m:         cfg.Metrics,
		listeners: map[net.Listener]struct{}{},
		conns:     map[net.Conn]struct{}{},
		h2conns:   map[*h2conn]struct{}{},
		streams:   map[netip.Addr]map[*stream]struct{}{},
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.m == nil {
		s.m = nopMetrics{}
	}
	return s, nil
}

// Serve accepts connections on l until it fails or the server shuts down.
// l is a plain TCP listener: the server does the TLS itself, because the
// certificate depends on each connection's local address.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			draining := s.draining
			s.mu.Unlock()
			if draining {
				return ErrServerClosed
			}
			if AcceptWillRecover(err) {
				// Out of descriptors and the like: back off, as net/http does.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.log.Warn("hbone accept", "err", err, "retry", delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		go s.ServeConn(c)
	}
}

// AcceptWillRecover reports whether an accept failed for want of a
// resource that frees up (file descriptors, memory) rather than because the
// listener is gone. Such an errno is no net.Error timeout, and Linux fails
// accept with it before it even looks for a connection: a loop that
// returned on it would leave the listener open with nobody accepting.
func AcceptWillRecover(err error) bool {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM:
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ServeConn runs the TLS handshake and HTTP/2 on one accepted connection and
// returns when it ends. Serve calls it; a caller with its own accept loop
// (a listener per pod namespace) may call it directly.
func (s *Server) ServeConn(c net.Conn) {
	if !s.track(c) {
		c.Close()
		return
	}
	defer s.untrack(c)
	defer c.Close()

	local, _ := netip.ParseAddrPort(c.LocalAddr().String())
	remote, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	remote = netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())

	tc := newBatchedTLS(c, s.tlsConfig(local), tls.Server)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err == nil && tc.ConnectionState().NegotiatedProtocol != ALPN {
		err = errors.New("client did not negotiate h2")
	}
	if err != nil {
		s.m.Refused(Inbound, ReasonHandshake)
		s.log.Info("hbone handshake refused", "src", remote, "dst", local, "reason", ReasonHandshake, "err", err)
		return
	}
	cs := tc.ConnectionState()
	peer, _ := SpiffeID(cs.PeerCertificates[0]) // checked in VerifyConnection
	s.m.ConnOpened(Inbound)
	defer s.m.ConnClosed(Inbound)

	s.serveH2(tc, connInfo{peer: peer, local: local, remote: remote})
}

func (s *Server) tlsConfig(local netip.AddrPort) *tls.Config {
	roots := s.cfg.Roots()
	if roots == nil {
		// With ClientCAs nil, crypto/tls would check client
		// certificates against the system pool.
		return &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return nil, errNoRoots
		}}
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{ALPN},
		ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs:  roots,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			cert, err := s.cfg.Certificate(hello.Context(), local)
			if err != nil {
				return nil, fmt.Errorf("no certificate for %s: %w", local, err)
			}
			return cert, nil
		},
		// crypto/tls has checked the chain (for client auth) by now; a mesh
		// peer must also name one workload.
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no client certificate")
			}
			_, err := SpiffeID(cs.PeerCertificates[0])
			return err
		},
	}
}

type connInfo struct {
	peer          string
	local, remote netip.AddrPort
}

func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	s.conns[c] = struct{}{}
	s.connWG.Add(1)
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.connWG.Done()
}

// addConn registers an HTTP/2 connection for Shutdown; false means the
// server is already draining.
func (s *Server) addConn(c *h2conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h2conns[c] = struct{}{}
	return !s.draining
}

func (s *Server) removeConn(c *h2conn) {
	s.mu.Lock()
	delete(s.h2conns, c)
	s.mu.Unlock()
}

func (s *Server) goAwayAll() []*h2conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*h2conn, 0, len(s.h2conns))
	for c := range s.h2conns {
		out = append(out, c)
	}
	return out
}

// CloseDestination resets every open stream whose destination address is ip
// (any port), and returns how many it reset. A node proxy calls it when a
// workload leaves, so no tunnel outlives the workload it reached.
func (s *Server) CloseDestination(ip netip.Addr) int {
	s.mu.Lock()
	set := s.streams[ip.Unmap()]
	victims := make([]*stream, 0, len(set))
	for st := range set {
		victims = append(victims, st)
	}
	s.mu.Unlock()
	for _, st := range victims {
		st.kill()
	}
	return len(victims)
}

// OpenStreams returns the open inbound streams, for /debug.
func (s *Server) OpenStreams() []StreamInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []StreamInfo
	for _, set := range s.streams {
		for st := range set {
			out = append(out, st.info)
		}
	}
	return out
}

// Shutdown drains: it stops accepting, asks every HTTP/2 client to go away
// (GOAWAY, so dialers open new connections elsewhere), lets open streams
// finish until ctx ends, then closes what is left. It returns ctx's error if
// it had to cut streams short.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	for l := range s.listeners {
		l.Close()
	}
	s.mu.Unlock()
	// GOAWAY on every connection; each closes once its last stream ends.
	for _, c := range s.goAwayAll() {
		c.goAway()
	}

	done := make(chan struct{})
	go func() { s.connWG.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.Close()
		<-done
		return ctx.Err()
	}
}

// Close stops at once: listeners, connections and streams.
func (s *Server) Close() error {
	s.mu.Lock()
	s.draining = true
	s.closed = true
	for l := range s.listeners {
		l.Close()
	}
	var victims []*stream
	for _, set := range s.streams {
		for st := range set {
			victims = append(victims, st)
		}
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	for _, st := range victims {
		st.kill()
	}
	return nil
}
