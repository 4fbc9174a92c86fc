package hbone

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// stream is one accepted CONNECT tunnel, registered so CloseDestination and
// Close can reach it.
type stream struct {
	info   StreamInfo
	h      *h2stream
	mu     sync.Mutex
	killed bool
}

// kill resets the stream and closes its upstream connection.
func (st *stream) kill() {
	st.mu.Lock()
	st.killed = true
	st.mu.Unlock()
	st.h.reset(http2.ErrCodeCancel)
}

func (st *stream) wasKilled() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.killed
}

func (s *Server) refuse(h *h2stream, info StreamInfo, code int, reason Reason, err error, fields ...[2]string) {
	s.m.Refused(Inbound, reason)
	s.log.Info("hbone tunnel refused", "peer", info.Peer, "src", info.Remote, "dst", info.Dest,
		"status", code, "reason", reason, "err", err)
	// The status says enough, as http.Error words it; the peer learns
	// nothing about our policy or the destination's state beyond it.
	body := http.StatusText(code) + "\n"
	fields = append(fields,
		[2]string{"content-type", "text/plain; charset=utf-8"},
		[2]string{"x-content-type-options", "nosniff"},
		[2]string{"content-length", strconv.Itoa(len(body))})
	if h.writeHeaders(code, fields, false) == nil {
		h.send([]byte(body), true)
	}
}

// serveStream answers one CONNECT stream and, once it is allowed and
// dialled, relays it.
func (s *Server) serveStream(h *h2stream, req request) {
	c := h.c
	defer c.streamDone(h)
	defer func() {
		// A stream that did not end both ways ends here: NO_ERROR asks a
		// refused source to stop sending; a tunnel that failed was reset
		// already.
		if !h.finished() {
			h.reset(http2.ErrCodeNo)
		}
	}()
	info := StreamInfo{Peer: c.ci.peer, Local: c.ci.local, Remote: c.ci.remote}
	if req.tooLarge {
		// RFC 9113 §10.5.1 suggests 431 for a field section larger than
		// the server is willing to handle.
		s.refuse(h, info, http.StatusRequestHeaderFieldsTooLarge, ReasonHeaders, errors.New("header list over 64 KiB"))
		return
	}
	if req.method != http.MethodConnect {
		s.refuse(h, info, http.StatusMethodNotAllowed, ReasonMethod, errors.New("method "+req.method),
			[2]string{"allow", http.MethodConnect})
		return
	}
	dest, err := netip.ParseAddrPort(req.authority)
	if err == nil && (dest.Port() == 0 || dest.Addr().Zone() != "" || !dest.Addr().IsValid()) {
		err = errors.New("not an ip:port")
	}
	if err != nil {
		s.refuse(h, info, http.StatusBadRequest, ReasonAuthority, err)
		return
	}
	info.Dest = netip.AddrPortFrom(dest.Addr().Unmap(), dest.Port())

	if s.cfg.Authorize != nil {
		if err := s.cfg.Authorize(h.ctx, info); err != nil {
			s.refuse(h, info, http.StatusForbidden, ReasonPolicy, err)
			return
		}
	}
	st := &stream{info: info, h: h}
	if !s.register(st) {
		s.refuse(h, info, http.StatusServiceUnavailable, ReasonDraining, ErrServerClosed)
		return
	}
	defer s.unregister(st)

	// A stream reset by now is not dialled, and a dial its reset cancels
	// is no refusal: HEADERS each followed at once by RST_STREAM ("rapid
	// reset", CVE-2023-44487) must not open destination connections.
	if h.ctx.Err() != nil {
		return
	}
	up, err := s.cfg.Dial(h.ctx, info.Dest)
	if err != nil {
		if h.ctx.Err() == nil {
			s.refuse(h, info, http.StatusServiceUnavailable, ReasonDial, err)
		}
		return
	}
	if !h.setUpstream(up) {
		// CloseDestination, the peer or the connection ended it while we
		// dialled.
		up.Close()
		return
	}
	if err := h.writeHeaders(http.StatusOK, nil, false); err != nil {
		up.Close()
		return
	}
	s.m.StreamOpened(Inbound)
	start := time.Now()
	s.log.Debug("hbone tunnel open", "peer", info.Peer, "src", info.Remote, "dst", info.Dest)

	sent, received, cerr := s.relay(h, up)
	if cerr == nil && st.wasKilled() {
		cerr = errStreamReset
	}

	s.m.StreamClosed(Inbound, sent, received)
	s.log.Info("hbone tunnel closed", "peer", info.Peer, "src", info.Remote, "dst", info.Dest,
		"sent", sent, "received", received, "duration", time.Since(start), "err", cerr)
}

// relay copies both ways, each half-close carried on its own: the source's
// END_STREAM becomes a FIN toward the destination (CloseWrite), and the
// destination's FIN becomes END_STREAM toward the source, each while the
// other direction goes on. The tunnel ends when both have ended. A failure
// either way resets the stream (CONNECT_ERROR) and closes the destination's
// connection, so neither end mistakes it for a clean end of data.
func (s *Server) relay(h *h2stream, up net.Conn) (sent, received int64, err error) {
	type result struct {
		n   int64
		err error
	}
	upDone := make(chan result, 1)
	go func() {
		n, err := h.writeTo(up)
		if err == nil {
			err = closeWrite(up)
		}
		if err != nil {
			h.reset(http2.ErrCodeConnect)
		}
		upDone <- result{n, err}
	}()
	received, derr := h.readFrom(up)
	if derr != nil {
		h.reset(http2.ErrCodeConnect)
	}
	u := <-upDone
	up.Close()
	if derr != nil {
		return u.n, received, derr
	}
	return u.n, received, u.err
}

// closeWrite half-closes a connection that can, and closes one that cannot.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

func (s *Server) register(st *stream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	ip := st.info.Dest.Addr()
	set := s.streams[ip]
	if set == nil {
		set = map[*stream]struct{}{}
		s.streams[ip] = set
	}
	set[st] = struct{}{}
	return true
}

func (s *Server) unregister(st *stream) {
	s.mu.Lock()
	ip := st.info.Dest.Addr()
	delete(s.streams[ip], st)
	if len(s.streams[ip]) == 0 {
		delete(s.streams, ip)
	}
	s.mu.Unlock()
}
