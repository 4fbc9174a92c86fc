package hbone

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// stream is one accepted CONNECT tunnel, registered so CloseDestination and
// Close can reach it.
type stream struct {
	info     StreamInfo
	mu       sync.Mutex
	w        http.ResponseWriter // nil once the handler has returned
	upstream net.Conn
	killed   bool
}

// deadliner is the part of the HTTP/2 ResponseWriter that can cut a stream
// from another goroutine: a past read deadline fails the pending body read,
// a past write deadline resets the stream.
type deadliner interface {
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// kill resets the stream and closes its upstream connection.
func (st *stream) kill() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.killed = true
	if st.upstream != nil {
		st.upstream.Close()
	}
	if d, ok := st.w.(deadliner); ok && st.w != nil {
		past := time.Unix(1, 0)
		_ = d.SetReadDeadline(past)
		_ = d.SetWriteDeadline(past)
	}
}

func (st *stream) wasKilled() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.killed
}

func (s *Server) refuse(w http.ResponseWriter, info StreamInfo, code int, reason Reason, err error) {
	s.m.Refused(Inbound, reason)
	s.log.Info("hbone tunnel refused", "peer", info.Peer, "src", info.Remote, "dst", info.Dest,
		"status", code, "reason", reason, "err", err)
	// The status says enough; the peer learns nothing about our policy or
	// the destination's state beyond it.
	http.Error(w, http.StatusText(code), code)
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	ci, _ := r.Context().Value(connInfoKey{}).(connInfo)
	info := StreamInfo{Peer: ci.peer, Local: ci.local, Remote: ci.remote}
	if r.Method != http.MethodConnect {
		w.Header().Set("Allow", http.MethodConnect)
		s.refuse(w, info, http.StatusMethodNotAllowed, ReasonMethod, errors.New("method "+r.Method))
		return
	}
	dest, err := netip.ParseAddrPort(r.Host)
	if err == nil && (dest.Port() == 0 || dest.Addr().Zone() != "" || !dest.Addr().IsValid()) {
		err = errors.New("not an ip:port")
	}
	if err != nil {
		s.refuse(w, info, http.StatusBadRequest, ReasonAuthority, err)
		return
	}
	info.Dest = netip.AddrPortFrom(dest.Addr().Unmap(), dest.Port())

	if s.cfg.Authorize != nil {
		if err := s.cfg.Authorize(r.Context(), info); err != nil {
			s.refuse(w, info, http.StatusForbidden, ReasonPolicy, err)
			return
		}
	}
	st := &stream{info: info, w: w}
	if !s.register(st) {
		s.refuse(w, info, http.StatusServiceUnavailable, ReasonDraining, ErrServerClosed)
		return
	}
	defer s.unregister(st)

	up, err := s.cfg.Dial(r.Context(), info.Dest)
	if err != nil {
		s.refuse(w, info, http.StatusServiceUnavailable, ReasonDial, err)
		return
	}
	st.mu.Lock()
	st.upstream = up
	killed := st.killed
	st.mu.Unlock()
	if killed {
		// CloseDestination ran while we dialled.
		up.Close()
		panic(http.ErrAbortHandler)
	}

	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	flusher.Flush()
	s.m.StreamOpened(Inbound)
	start := time.Now()
	s.log.Debug("hbone tunnel open", "peer", info.Peer, "src", info.Remote, "dst", info.Dest)

	sent, received, cerr := s.relay(st, w, r.Body, flusher, up)

	s.m.StreamClosed(Inbound, sent, received)
	s.log.Info("hbone tunnel closed", "peer", info.Peer, "src", info.Remote, "dst", info.Dest,
		"sent", sent, "received", received, "duration", time.Since(start), "err", cerr)
	if cerr != nil || st.wasKilled() {
		// A failure on either side resets the stream, so the source sees
		// an error and not a clean end of data.
		panic(http.ErrAbortHandler)
	}
}

// relay copies both ways. The source's END_STREAM becomes a FIN toward the
// destination (CloseWrite), and the destination may keep answering. The
// destination's FIN ends the stream: net/http gives a handler no way to end
// its half while still reading, so returning sends END_STREAM, and the
// source sees EOF (the HTTP/2 server then asks it, with RST_STREAM
// NO_ERROR, to stop sending).
func (s *Server) relay(st *stream, w http.ResponseWriter, body io.ReadCloser, flusher http.Flusher, up net.Conn) (sent, received int64, err error) {
	type result struct {
		n   int64
		err error
	}
	upDone := make(chan result, 1)
	go func() {
		n, err := copyGrowing(up, body, nil)
		if err == nil {
			err = closeWrite(up)
		}
		if err != nil {
			// The source failed: tear down the other direction too.
			up.Close()
		}
		upDone <- result{n, err}
	}()

	received, derr := copyGrowing(w, up, flusher.Flush)
	if derr != nil {
		// Either the destination or the source's stream failed.
		up.Close()
	}
	// Stop reading the source if it is still sending, and wait so the
	// byte count is final.
	if d, ok := w.(deadliner); ok {
		_ = d.SetReadDeadline(time.Unix(1, 0))
	}
	u := <-upDone
	up.Close()
	if derr != nil {
		return u.n, received, derr
	}
	if u.err != nil && !isDeadline(u.err) {
		return u.n, received, u.err
	}
	return u.n, received, nil
}

func isDeadline(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
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
	// After this the ResponseWriter is no longer valid; kill must not touch it.
	st.mu.Lock()
	st.w = nil
	st.mu.Unlock()
}
