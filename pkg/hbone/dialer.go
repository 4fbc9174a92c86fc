package hbone

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"sync"
	"time"
)

// Target is where a tunnel goes.
type Target struct {
	// Node is the HBONE endpoint, the destination node's ip:15008.
	Node netip.AddrPort
	// Dest is the application's destination, sent as :authority.
	Dest netip.AddrPort
	// Identity is the SPIFFE ID the server must present; empty accepts any
	// certificate from the mesh roots.
	Identity string
}

// DialerConfig is what a Dialer needs. Roots is required.
type DialerConfig struct {
	// Roots returns the mesh roots server certificates must chain to.
	Roots func() *x509.CertPool
	// NetDial opens the TCP connection to a node. Nil uses a net.Dialer;
	// a node proxy may dial from another namespace or with a socket mark.
	NetDial func(ctx context.Context, node netip.AddrPort) (net.Conn, error)
	// Metrics receives counts; nil drops them.
	Metrics Metrics
	// Log receives connection failures; nil discards.
	Log *slog.Logger
	// HandshakeTimeout bounds the TLS handshake; zero means 10 s.
	HandshakeTimeout time.Duration
	// IdleTimeout closes a pooled connection with no streams; zero means 60 s.
	IdleTimeout time.Duration
}

// Dialer opens tunnels, pooling HTTP/2 connections by (source identity,
// destination identity, node), so that many streams share one handshake but
// never a certificate they should not. It is safe for concurrent use.
type Dialer struct {
	cfg DialerConfig
	t   *http.Transport
	m   Metrics
	log *slog.Logger

	mu      sync.Mutex
	pool    map[poolKey][]*pooled
	dialing map[poolKey]*dialCall
	closed  bool
}

type poolKey struct {
	src, dst string
	node     netip.AddrPort
}

// pooled is one HTTP/2 connection and the address it was dialled from.
type pooled struct {
	cc    *http.ClientConn
	local net.Addr
}

// carrier is what newConn asks the transport to dial, handed to
// dialCarrier through the dial's context; local is filled in by it.
type carrier struct {
	key   poolKey
	src   *tls.Certificate
	local net.Addr
}

type carrierCtxKey struct{}

type dialCall struct {
	done chan struct{}
	err  error
}

// NewDialer checks the config and fills its defaults.
func NewDialer(cfg DialerConfig) (*Dialer, error) {
	if cfg.Roots == nil {
		return nil, errors.New("hbone: DialerConfig needs Roots")
	}
	if cfg.NetDial == nil {
		d := &net.Dialer{Timeout: 5 * time.Second}
		cfg.NetDial = func(ctx context.Context, node netip.AddrPort) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", node.String())
		}
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 60 * time.Second
	}
	d := &Dialer{
		cfg:     cfg,
		m:       cfg.Metrics,
		log:     cfg.Log,
		pool:    map[poolKey][]*pooled{},
		dialing: map[poolKey]*dialCall{},
	}
	if d.m == nil {
		d.m = nopMetrics{}
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	// The transport speaks HTTP/2 with prior knowledge over connections
	// that dialCarrier has already secured and verified (net/http would
	// otherwise dial and verify by host name, and a workload's certificate
	// names no host): "unencrypted" is its view, not the wire's.
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	d.t = &http.Transport{
		Protocols:       protocols,
		DialContext:     d.dialCarrier,
		IdleConnTimeout: cfg.IdleTimeout,
		HTTP2: &http.HTTP2Config{
			// Notice a dead peer on a pooled connection instead of
			// handing out streams that will hang.
			SendPingTimeout: 30 * time.Second,
			PingTimeout:     15 * time.Second,
		},
	}
	return d, nil
}

// StatusError is a tunnel the server answered with other than 200.
type StatusError struct{ Code int }

func (e *StatusError) Error() string {
	return fmt.Sprintf("hbone: server answered %d %s", e.Code, http.StatusText(e.Code))
}

// Dial opens a tunnel to t under the source workload's certificate and
// returns once the server has answered 200. A CONNECT the server ended
// without processing it is sent again on another connection, maxRetries
// times at most (RFC 9113 §8.7); it never carried data, as the caller
// writes only once Dial has returned. The Conn's Close resets the stream;
// CloseWrite ends only the source's half.
func (d *Dialer) Dial(ctx context.Context, src *tls.Certificate, t Target) (*Conn, error) {
	srcID, err := certIdentity(src)
	if err != nil {
		return nil, fmt.Errorf("hbone: source certificate: %w", err)
	}
	if !t.Dest.IsValid() || t.Dest.Port() == 0 {
		return nil, fmt.Errorf("hbone: bad destination %v", t.Dest)
	}
	key := poolKey{src: srcID, dst: t.Identity, node: t.Node}
	var tried []*pooled // the connections that left the CONNECT unprocessed
	for {
		pc, err := d.conn(ctx, key, src, tried)
		if err != nil {
			d.m.Refused(Outbound, ReasonTransport)
			return nil, err
		}
		c, err := d.connect(ctx, pc, t)
		var status *StatusError
		switch {
		case err == nil:
			d.m.StreamOpened(Outbound)
			return c, nil
		case errors.As(err, &status):
			d.m.Refused(Outbound, ReasonStatus)
			return nil, err
		case errors.Is(err, ctx.Err()):
			return nil, err
		case unprocessed(err) && len(tried) < maxRetries:
			d.log.Debug("hbone CONNECT not processed, sending it again", "node", t.Node, "dst", t.Dest, "err", err)
			tried = append(tried, pc)
			continue
		}
		d.m.Refused(Outbound, ReasonTransport)
		return nil, fmt.Errorf("hbone: CONNECT %s via %s: %w", t.Dest, t.Node, err)
	}
}

// connect sends a CONNECT for t on pc and waits, as long as ctx lets it,
// for the answer. Its errors are the transport's, a *StatusError, or ctx's.
func (d *Dialer) connect(ctx context.Context, pc *pooled, t Target) (*Conn, error) {
	pr, pw := io.Pipe()
	authority := t.Dest.String()
	req := (&http.Request{
		Method:        http.MethodConnect,
		URL:           &url.URL{Host: authority},
		Host:          authority,
		Header:        http.Header{},
		Body:          pr,
		ContentLength: -1,
	}).WithContext(context.WithoutCancel(ctx))
	// The request's context would reset the stream when it ends, so the
	// tunnel must not inherit the caller's; ctx bounds only the wait for
	// the answer.
	type answer struct {
		resp *http.Response
		err  error
	}
	ch := make(chan answer, 1)
	go func() {
		resp, err := pc.cc.RoundTrip(req)
		ch <- answer{resp, err}
	}()
	var a answer
	select {
	case a = <-ch:
	case <-ctx.Done():
		pw.CloseWithError(ctx.Err())
		go func() {
			if a := <-ch; a.resp != nil {
				a.resp.Body.Close()
			}
		}()
		return nil, ctx.Err()
	}
	if a.err != nil {
		pw.CloseWithError(a.err)
		return nil, a.err
	}
	if a.resp.StatusCode != http.StatusOK {
		a.resp.Body.Close()
		pw.Close()
		return nil, &StatusError{Code: a.resp.StatusCode}
	}
	return &Conn{
		body:   a.resp.Body,
		pw:     pw,
		local:  pc.local,
		remote: net.TCPAddrFromAddrPort(t.Dest),
		m:      d.m,
	}, nil
}

// conn returns a pooled connection with a stream reserved on it, other than
// those in avoid, dialling a new one when none has room. Only one dial per
// key runs at a time, so a burst of first connections shares one handshake.
func (d *Dialer) conn(ctx context.Context, key poolKey, src *tls.Certificate, avoid []*pooled) (*pooled, error) {
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return nil, errors.New("hbone: dialer closed")
		}
		live := d.pool[key][:0]
		var found *pooled
		for _, pc := range d.pool[key] {
			if pc.cc.Err() != nil {
				continue
			}
			live = append(live, pc)
			if found == nil && !slices.Contains(avoid, pc) && pc.cc.Reserve() == nil {
				found = pc
			}
		}
		d.pool[key] = live
		if len(live) == 0 {
			delete(d.pool, key)
		}
		if found != nil {
			d.mu.Unlock()
			return found, nil
		}
		if call := d.dialing[key]; call != nil {
			d.mu.Unlock()
			select {
			case <-call.done:
				if call.err != nil {
					return nil, call.err
				}
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		call := &dialCall{done: make(chan struct{})}
		d.dialing[key] = call
		d.mu.Unlock()

		pc, err := d.newConn(ctx, key, src)
		d.mu.Lock()
		delete(d.dialing, key)
		call.err = err
		if err == nil {
			d.pool[key] = append(d.pool[key], pc)
		}
		d.mu.Unlock()
		close(call.done)
		if err != nil {
			return nil, err
		}
		// A key may never be dialled again (in-pod mode keys by
		// destination pod), so an ended connection must leave the pool
		// by itself. The hook can run inside Reserve, under d.mu.
		pc.cc.SetStateHook(func(cc *http.ClientConn) {
			if cc.Err() != nil {
				go d.forget(key, pc)
			}
		})
	}
}

// forget drops an ended connection from the pool.
func (d *Dialer) forget(key poolKey, pc *pooled) {
	d.mu.Lock()
	defer d.mu.Unlock()
	pcs := slices.DeleteFunc(d.pool[key], func(p *pooled) bool { return p == pc })
	if len(pcs) == 0 {
		delete(d.pool, key)
		return
	}
	d.pool[key] = pcs
}

func (d *Dialer) newConn(ctx context.Context, key poolKey, src *tls.Certificate) (*pooled, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.HandshakeTimeout)
	defer cancel()
	c := &carrier{key: key, src: src}
	cc, err := d.t.NewClientConn(context.WithValue(ctx, carrierCtxKey{}, c), "http", key.node.String())
	if err != nil {
		return nil, err
	}
	return &pooled{cc: cc, local: c.local}, nil
}

// dialCarrier is the transport's DialContext: the TCP connection to the
// node, from the source's address, and mutual TLS under the source's
// certificate, checking that the node presents the destination's identity.
func (d *Dialer) dialCarrier(ctx context.Context, _, _ string) (net.Conn, error) {
	c, ok := ctx.Value(carrierCtxKey{}).(*carrier)
	if !ok {
		return nil, errors.New("hbone: dial without a carrier") // only newConn dials
	}
	key := c.key
	raw, err := d.cfg.NetDial(ctx, key.node)
	if err != nil {
		return nil, fmt.Errorf("hbone: dial %s: %w", key.node, err)
	}
	roots := d.cfg.Roots()
	tc := newBatchedTLS(raw, &tls.Config{
		MinVersion:   tls.VersionTLS13,
		NextProtos:   []string{ALPN},
		Certificates: []tls.Certificate{*c.src},
		// The server's certificate names a workload, not a host: the
		// chain and SPIFFE ID are checked in VerifyConnection instead.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := verifyPeer(cs, roots, x509.ExtKeyUsageServerAuth)
			if err != nil {
				return err
			}
			if key.dst != "" && id != key.dst {
				return fmt.Errorf("server is %s, want %s", id, key.dst)
			}
			return nil
		},
	}, tls.Client)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		d.log.Info("hbone outbound handshake failed", "node", key.node, "src", key.src, "want", key.dst, "err", err)
		return nil, fmt.Errorf("hbone: TLS to %s: %w", key.node, err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != ALPN {
		tc.Close()
		return nil, fmt.Errorf("hbone: %s negotiated %q, not h2", key.node, p)
	}
	c.local = tc.LocalAddr()
	// Counted open here, as its close is counted whoever closes it (the
	// transport does, should it fail to start HTTP/2 on it).
	d.m.ConnOpened(Outbound)
	return &countedConn{Conn: tc, d: d}, nil
}

// countedConn reports the carrier's close to Metrics exactly once.
type countedConn struct {
	net.Conn
	d    *Dialer
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.d.m.ConnClosed(Outbound) })
	return c.Conn.Close()
}

// PoolSize returns how many HTTP/2 connections are pooled, for tests and
// /debug.
func (d *Dialer) PoolSize() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, pcs := range d.pool {
		for _, pc := range pcs {
			if pc.cc.Err() == nil {
				n++
			}
		}
	}
	return n
}

// Close closes every pooled connection, resetting their streams.
func (d *Dialer) Close() error {
	d.mu.Lock()
	d.closed = true
	pool := d.pool
	d.pool = map[poolKey][]*pooled{}
	d.mu.Unlock()
	for _, pcs := range pool {
		for _, pc := range pcs {
			pc.cc.Close()
		}
	}
	return nil
}
