package hbone

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// HBONE's HTTP/2 is served here rather than by x/net's http2.Server, because
// that server ends a response only when its handler returns and then resets
// the request side (its server.go says so in the TODO about
// half-closed-local handlers), so a tunnel could not carry the destination's
// half-close. This one speaks the part of HTTP/2 a CONNECT tunnel needs, on
// x/net's Framer and hpack: SETTINGS, flow control both ways, END_STREAM per
// direction, RST_STREAM, PING and GOAWAY.

const (
	// The window a client may fill before the node proxy has passed the
	// bytes on. 256 KiB (ztunnel's send buffer) ran dry between window
	// updates at a few hundred MB/s; data is buffered only as it arrives,
	// so an idle stream costs nothing.
	streamWindow = 1 << 20
	connWindow   = 16 << 20
	// The smallest frame size HTTP/2 allows. A Go client keeps one scratch
	// buffer of the server's frame size per open stream, so a larger size
	// would cost every idle tunnel that much memory.
	readFrameSize = 16 << 10
	// A window update is sent once this share of a window has been
	// consumed, so a bulk transfer does not cost one frame per read.
	refreshDivisor = 4
	// The largest flow-control window HTTP/2 allows (RFC 9113 §6.9.1).
	maxWindow = 1<<31 - 1
	// The largest field section a request may carry, decoded, as
	// SETTINGS_MAX_HEADER_LIST_SIZE counts it (§6.5.2); a CONNECT needs
	// a few dozen bytes.
	maxHeaderListSize = 64 << 10
	// How long a connection that has sent GOAWAY for an error goes on
	// reading, so that closing it does not destroy the GOAWAY.
	lingerTimeout = time.Second
)

var errStreamReset = errors.New("hbone: stream reset")

// h2conn is one HTTP/2 connection. Lock order: wmu before mu.
type h2conn struct {
	s   *Server
	nc  *batchedTLS
	ci  connInfo
	ctx context.Context
	end context.CancelFunc

	wmu  sync.Mutex // one writer of frames at a time
	fr   *http2.Framer
	out  frameBuf
	enc  *hpack.Encoder
	hbuf bytes.Buffer
	// writeBy is the write deadline set on nc (under wmu).
	writeBy time.Time
	// wclosed says our side has ended with close_notify (under wmu).
	wclosed bool

	// idle fires IdleTimeout after the connection last had no stream
	// (re-armed under mu), and closes it if it still has none.
	idle *time.Timer

	mu        sync.Mutex
	streams   map[uint32]*h2stream
	lastID    uint32
	sendWin   int64 // the peer's connection window for our DATA
	initWin   int64 // the peer's SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame int   // the peer's SETTINGS_MAX_FRAME_SIZE
	recvWin   int64 // what the peer may still send on the connection
	unacked   int64 // consumed but not yet given back to the peer
	goingAway bool
	goAwayID  uint32 // the last stream ID our first GOAWAY named
	closed    bool
	wg        sync.WaitGroup // the streams' goroutines

	// resets are streams the node reset while the client could still
	// send on them (under mu).
	resets resetIDs
}

// frameBuf gathers the frames of one write so they reach TLS as one write;
// an idle connection holds no buffer.
type frameBuf struct{ b *[]byte }

func (f *frameBuf) Write(p []byte) (int, error) {
	if f.b == nil {
		f.b = batchPool.Get().(*[]byte)
	}
	*f.b = append(*f.b, p...)
	return len(p), nil
}

// serveH2 runs HTTP/2 on an authenticated TLS connection until it ends.
func (s *Server) serveH2(nc *batchedTLS, ci connInfo) {
	c := &h2conn{
		s: s, nc: nc, ci: ci,
		streams: map[uint32]*h2stream{},
		sendWin: 65535, initWin: 65535, peerFrame: 16 << 10,
		recvWin: connWindow,
	}
	c.ctx, c.end = context.WithCancel(context.Background())
	defer c.end()
	c.fr = http2.NewFramer(&c.out, nc)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = maxHeaderListSize
	c.fr.SetMaxReadFrameSize(readFrameSize)
	c.fr.SetReuseFrames()
	c.enc = hpack.NewEncoder(&c.hbuf)

	nc.SetReadDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(nc, preface); err != nil || string(preface) != http2.ClientPreface {
		s.log.Info("hbone connection without HTTP/2 preface", "src", ci.remote, "err", err)
		nc.Close()
		return
	}
	nc.SetReadDeadline(time.Time{})
	if err := c.write(func(fr *http2.Framer) error {
		if err := fr.WriteSettings(
			http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: s.cfg.MaxConcurrentStreams},
			http2.Setting{ID: http2.SettingInitialWindowSize, Val: streamWindow},
			http2.Setting{ID: http2.SettingMaxFrameSize, Val: readFrameSize},
			http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: maxHeaderListSize},
		); err != nil {
			return err
		}
		return fr.WriteWindowUpdate(0, connWindow-65535)
	}); err != nil {
		return
	}
	if !s.addConn(c) {
		c.goAway()
	}
	defer s.removeConn(c)
	c.mu.Lock()
	c.idle = time.AfterFunc(s.cfg.IdleTimeout, c.closeIfIdle)
	c.mu.Unlock()
	defer c.idle.Stop()

	err := c.readLoop() // never nil: the loop ends only on an error
	c.teardown(errors.As(err, new(http2.ConnectionError)))
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		s.log.Debug("hbone connection ended", "src", ci.remote, "err", err)
	}
}

func (c *h2conn) readLoop() error {
	for {
		// ReadFrame in two steps: a malformed frame's error does not say
		// what type of frame it was, and streamError needs to know.
		fh, err := c.fr.ReadFrameHeader()
		var f http2.Frame
		if err == nil {
			f, err = c.fr.ReadFrameForHeader(fh)
		}
		if err == nil {
			err = c.handle(f)
		} else {
			err = c.readError(fh.Type, err)
		}
		var se http2.StreamError
		if errors.As(err, &se) {
			err = c.streamError(fh, se.StreamID, se.Code)
		}
		if err == nil {
			continue
		}
		var ce http2.ConnectionError
		if errors.As(err, &ce) {
			c.goAwayError(http2.ErrCode(ce))
		}
		return err
	}
}

// streamError ends a stream the peer broke with frame fh (RFC
// 9113 §5.4.2). RST_STREAM alone would leave an open stream relaying: its
// slot taken, its destination connected, and DATA still sent after our own
// reset. A malformed HEADERS that would open a stream uses up its ID as
// a valid one does, and is a connection error where one would be; on a
// stream the node has reset it is discarded, as valid ones are there
// (§5.1). Any other frame on an idle stream is a connection error too
// (§5.1), and no RST_STREAM may name an idle stream (§6.4).
func (c *h2conn) streamError(fh http2.FrameHeader, id uint32, code http2.ErrCode) error {
	typ := fh.Type
	c.mu.Lock()
	st := c.streams[id]
	var err error
	discard := false
	switch {
	case st != nil:
	case typ == http2.FrameHeaders && c.resetByUsLocked(id):
		discard = true
	case typ == http2.FrameHeaders:
		if err = c.openIDLocked(id); err == nil && !fh.Flags.Has(http2.FlagHeadersEndStream) {
			c.noteResetLocked(id)
		}
	case c.idleLocked(id):
		err = connErr(http2.ErrCodeProtocol)
	}
	c.mu.Unlock()
	switch {
	case discard:
	case err != nil:
		return err
	case st != nil:
		st.reset(code)
	default:
		c.resetID(id, code)
	}
	return nil
}

func connErr(code http2.ErrCode) error { return http2.ConnectionError(code) }

// readError is the error RFC 9113 makes of what the framer could not read,
// where the framer's own error says less or otherwise. A frame it did not
// read, or a field block it did not decode to the end, leaves the whole
// connection unusable: the next frame cannot be found, or the HPACK state
// the connection shares would lag the peer's (§4.3).
func (c *h2conn) readError(typ http2.FrameType, err error) error {
	switch {
	case errors.Is(err, http2.ErrFrameTooLarge):
		// Its payload is left unread. §4.2 makes it a connection
		// error anyway for a frame that carries a field block.
		return connErr(http2.ErrCodeFrameSize)
	case typ == http2.FrameHeaders && errors.As(err, new(http2.StreamError)) && c.fr.ErrorDetail() == nil:
		// A malformed request (§8.1.1) is reported once its block is
		// decoded, with ErrorDetail saying what was wrong; without it
		// the frame itself was bad (padding past its end, which §6.2
		// makes a connection error) and its block was never decoded.
		return connErr(http2.ErrCodeProtocol)
	}
	return err
}

func (c *h2conn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		if err := f.ForeachSetting(c.applySetting); err != nil {
			return err
		}
		return c.write(func(fr *http2.Framer) error { return fr.WriteSettingsAck() })
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		data := f.Data
		return c.write(func(fr *http2.Framer) error { return fr.WritePing(true, data) })
	case *http2.WindowUpdateFrame:
		return c.windowUpdate(f.StreamID, int64(f.Increment))
	case *http2.MetaHeadersFrame:
		return c.headers(f)
	case *http2.DataFrame:
		return c.data(f)
	case *http2.RSTStreamFrame:
		// On an idle stream a connection error (RFC 9113 §6.4); on a
		// closed one ignored, as it may have crossed our own.
		c.mu.Lock()
		st := c.streams[f.StreamID]
		idle := c.idleLocked(f.StreamID)
		c.mu.Unlock()
		if idle {
			return connErr(http2.ErrCodeProtocol)
		}
		if st != nil {
			st.abort()
		}
	case *http2.PushPromiseFrame:
		return connErr(http2.ErrCodeProtocol) // clients do not push
	}
	// PRIORITY, the peer's GOAWAY and unknown frames need nothing: a
	// client that goes away closes the connection when done.
	return nil
}

func (c *h2conn) applySetting(s http2.Setting) error {
	if err := s.Valid(); err != nil {
		return err
	}
	switch s.ID {
	case http2.SettingInitialWindowSize:
		c.mu.Lock()
		defer c.mu.Unlock()
		delta := int64(s.Val) - c.initWin
		// A change that takes any stream's window past the maximum is
		// a connection error (RFC 9113 §6.9.2).
		for _, st := range c.streams {
			if st.sendWin+delta > maxWindow {
				return connErr(http2.ErrCodeFlowControl)
			}
		}
		c.initWin = int64(s.Val)
		for _, st := range c.streams {
			st.sendWin += delta
			st.cond.Broadcast()
		}
	case http2.SettingMaxFrameSize:
		c.mu.Lock()
		c.peerFrame = int(s.Val)
		c.mu.Unlock()
	case http2.SettingHeaderTableSize:
		c.wmu.Lock()
		c.enc.SetMaxDynamicTableSizeLimit(s.Val)
		c.wmu.Unlock()
	}
	return nil
}

func (c *h2conn) windowUpdate(id uint32, inc int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	// A window past the maximum is a connection error for the
	// connection's window, a stream error for a stream's (RFC 9113 §6.9.1).
	if id == 0 {
		c.sendWin += inc
		if c.sendWin > maxWindow {
			return connErr(http2.ErrCodeFlowControl)
		}
		for _, st := range c.streams {
			st.cond.Broadcast()
		}
		return nil
	}
	st := c.streams[id]
	if st == nil {
		// On a closed stream it is no error: the peer may have sent it
		// before our END_STREAM or RST_STREAM reached it (RFC 9113
		// §5.1, §6.9). On an idle one it is.
		if c.idleLocked(id) {
			return connErr(http2.ErrCodeProtocol)
		}
		return nil
	}
	if st.sendWin+inc > maxWindow {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeFlowControl}
	}
	st.sendWin += inc
	st.cond.Broadcast()
	return nil
}

// headers opens a stream, or ends the request of an open one (trailers).
func (c *h2conn) headers(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		// A CONNECT request has no trailers: after its HEADERS only DATA
		// and stream management frames may come (RFC 9113 §8.5), and
		// after its END_STREAM none but the latter (§5.1). Either way
		// the stream alone is broken; the field block was decoded, so
		// the connection serves on.
		code := http2.ErrCodeProtocol
		if st.remoteDone {
			code = http2.ErrCodeStreamClosed
		}
		c.mu.Unlock()
		return http2.StreamError{StreamID: id, Code: code}
	}
	if c.resetByUsLocked(id) {
		// Sent before the client saw our RST_STREAM (RFC 9113 §5.1):
		// the framer has decoded the field block, which keeps the
		// HPACK state in step, and that is all the frame needs.
		c.mu.Unlock()
		return nil
	}
	if err := c.openIDLocked(id); err != nil {
		c.mu.Unlock()
		return err
	}
	open := !f.StreamEnded() // the client may send more on it
	if c.goingAway || c.closed || len(c.streams) >= int(c.s.cfg.MaxConcurrentStreams) {
		if open {
			c.noteResetLocked(id)
		}
		c.mu.Unlock()
		c.resetID(id, http2.ErrCodeRefusedStream)
		return nil
	}
	req, err := parseRequest(f)
	if err != nil {
		if open {
			c.noteResetLocked(id)
		}
		c.mu.Unlock()
		c.s.log.Info("hbone request malformed", "peer", c.ci.peer, "src", c.ci.remote, "stream", id, "err", err)
		c.resetID(id, http2.ErrCodeProtocol)
		return nil
	}
	st := &h2stream{c: c, id: id, sendWin: c.initWin, recvWin: streamWindow, remoteDone: f.StreamEnded()}
	st.ctx, st.cancel = context.WithCancel(c.ctx)
	st.cond.L = &c.mu
	c.streams[id] = st
	c.wg.Add(1)
	c.mu.Unlock()
	go c.s.serveStream(st, req)
	return nil
}

// data queues a DATA frame's bytes for its stream's destination.
func (c *h2conn) data(f *http2.DataFrame) error {
	n := int64(f.Length) // padding counts against the windows too
	p := f.Data()
	c.mu.Lock()
	if n > c.recvWin {
		c.mu.Unlock()
		return connErr(http2.ErrCodeFlowControl)
	}
	c.recvWin -= n
	st := c.streams[f.StreamID]
	if st == nil || st.remoteDone || st.isReset || n > st.recvWin {
		idle := c.idleLocked(f.StreamID)
		// Sent before the client saw our RST_STREAM: ignored, as on a
		// reset stream still tracked, not answered with another reset
		// (RFC 9113 §5.1, "closed").
		crossed := st == nil && c.resetByUsLocked(f.StreamID)
		code := http2.ErrCodeStreamClosed
		if st != nil && !st.remoteDone && !st.isReset {
			code = http2.ErrCodeFlowControl
			c.noteResetLocked(f.StreamID)
		}
		c.mu.Unlock()
		// Nobody reads these bytes: give the connection's share back.
		c.consumed(nil, n)
		if idle {
			return connErr(http2.ErrCodeProtocol)
		}
		if !crossed && (st == nil || !st.isReset) {
			c.resetID(f.StreamID, code)
		}
		if st != nil {
			st.abort()
		}
		return nil
	}
	st.recvWin -= n
	st.queue(p)
	if f.StreamEnded() {
		st.remoteDone = true
	}
	st.cond.Broadcast()
	c.mu.Unlock()
	if pad := n - int64(len(p)); pad > 0 {
		c.consumed(st, pad)
	}
	return nil
}

// consumed gives n bytes of window back once they have left the proxy,
// batching the updates; st is nil for bytes that belonged to no stream.
// The windows we check DATA against grow only by the updates we send: the
// peer knows of no other room, so bytes held back in unacked must not let
// it send past what it was granted.
func (c *h2conn) consumed(st *h2stream, n int64) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	c.unacked += n
	var connInc, streamInc int64
	if c.unacked >= connWindow/refreshDivisor {
		connInc, c.unacked = c.unacked, 0
		c.recvWin += connInc
	}
	if st != nil {
		st.unacked += n
		if st.unacked >= streamWindow/refreshDivisor && !st.remoteDone && !st.isReset {
			streamInc, st.unacked = st.unacked, 0
			st.recvWin += streamInc
		}
	}
	closed := c.closed
	c.mu.Unlock()
	if closed || connInc+streamInc == 0 {
		return
	}
	if connInc > 0 {
		c.fr.WriteWindowUpdate(0, uint32(connInc))
	}
	if streamInc > 0 {
		c.fr.WriteWindowUpdate(st.id, uint32(streamInc))
	}
	c.flushLocked()
}

// write sends the frames fn writes, as one write to TLS.
func (c *h2conn) write(fn func(*http2.Framer) error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := fn(c.fr); err != nil {
		c.out.reset()
		return err
	}
	return c.flushLocked()
}

func (c *h2conn) flushLocked() error {
	b := c.out.b
	if b == nil {
		return nil
	}
	c.extendWriteDeadline()
	_, err := c.nc.Write(*b)
	c.out.reset()
	if err != nil {
		// A connection that cannot be written is over; the read loop
		// ends and takes the streams with it.
		c.nc.Close()
	}
	return err
}

func (f *frameBuf) reset() {
	if f.b != nil {
		*f.b = (*f.b)[:0]
		batchPool.Put(f.b)
		f.b = nil
	}
}

// resetID sends RST_STREAM for a stream that has no goroutines (yet).
func (c *h2conn) resetID(id uint32, code http2.ErrCode) {
	c.write(func(fr *http2.Framer) error { return fr.WriteRSTStream(id, code) })
}

// goAway refuses new streams and closes the connection once the open ones
// have ended: a graceful shutdown (RFC 9113 §6.8).
func (c *h2conn) goAway() {
	c.wmu.Lock()
	c.mu.Lock()
	if c.goingAway || c.closed {
		c.mu.Unlock()
		c.wmu.Unlock()
		return
	}
	c.goingAway = true
	c.goAwayID = c.lastID
	last, idle := c.lastID, len(c.streams) == 0
	c.mu.Unlock()
	c.fr.WriteGoAway(last, http2.ErrCodeNo, nil)
	c.flushLocked()
	c.wmu.Unlock()
	if idle {
		c.closeWrite()
	}
}

// goAwayError answers a connection error (RFC 9113 §5.4.1): GOAWAY with
// its code, and then, as nothing may follow it, the end of our side of the
// connection. A graceful GOAWAY sent before does not stand in for it, as
// the peer would not learn of the error, but its last stream ID holds: a
// later GOAWAY may not raise it (§6.8), and streams opened since were
// refused. Only a connection whose side has already ended sends nothing.
func (c *h2conn) goAwayError(code http2.ErrCode) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	last := c.lastID
	if c.goingAway {
		last = c.goAwayID
	}
	c.goingAway = true
	c.closed = true // no stream writes after the GOAWAY
	c.mu.Unlock()
	if c.wclosed {
		return
	}
	c.fr.WriteGoAway(last, code, nil)
	if c.flushLocked() == nil {
		c.closeWriteLocked()
	}
}

// extendWriteDeadline gives the next write WriteTimeout, at least half
// of it (resetting the deadline on every frame of a bulk transfer would
// cost a timer update each). Call with wmu held.
func (c *h2conn) extendWriteDeadline() {
	timeout := c.s.cfg.WriteTimeout
	if now := time.Now(); c.writeBy.Sub(now) < timeout/2 {
		c.writeBy = now.Add(timeout)
		c.nc.SetWriteDeadline(c.writeBy)
	}
}

// closeWrite ends our side with a TLS close_notify, so the client closes
// after reading everything we sent; the read deadline bounds the wait.
func (c *h2conn) closeWrite() {
	c.wmu.Lock()
	c.closeWriteLocked()
	c.wmu.Unlock()
	c.nc.SetReadDeadline(time.Now().Add(lingerTimeout))
}

func (c *h2conn) closeWriteLocked() {
	if c.wclosed {
		return
	}
	c.wclosed = true
	c.extendWriteDeadline()
	c.nc.CloseWrite()
}

// closeIfIdle sends GOAWAY, and so closes the connection, when it still
// has no stream (one may have opened as the timer fired).
func (c *h2conn) closeIfIdle() {
	c.mu.Lock()
	idle := len(c.streams) == 0
	c.mu.Unlock()
	if idle {
		c.s.log.Debug("closing idle hbone connection", "src", c.ci.remote)
		c.goAway()
	}
}

// teardown ends every stream once the connection is over, closes it, and
// waits for the streams' goroutines.
//
// After a connection error (linger) the peer may still be sending, and
// closing a socket with unread bytes in it aborts the connection: the
// kernel drops whatever it has not yet sent, our GOAWAY among it when the
// peer is slow to read, and answers with a TCP reset. RFC 9113 §5.4.1
// wants the peer to learn why the connection ended, so teardown first
// reads and discards for up to lingerTimeout, until the peer, having read
// the GOAWAY and our close_notify, closes its side.
func (c *h2conn) teardown(linger bool) {
	c.mu.Lock()
	c.closed = true // no frame after this
	streams := make([]*h2stream, 0, len(c.streams))
	for _, st := range c.streams {
		streams = append(streams, st)
	}
	c.mu.Unlock()
	c.end()
	if !linger {
		c.nc.Close() // also frees a writer stuck on a peer that does not read
	}
	for _, st := range streams {
		st.abort()
	}
	if linger {
		c.nc.SetReadDeadline(time.Now().Add(lingerTimeout))
		io.Copy(io.Discard, c.nc)
		c.nc.Close()
	}
	c.wg.Wait()
}

// streamDone forgets a finished stream, and closes a draining connection
// after its last one.
func (c *h2conn) streamDone(st *h2stream) {
	st.cancel()
	c.mu.Lock()
	delete(c.streams, st.id)
	last := c.goingAway && len(c.streams) == 0 && !c.closed
	if len(c.streams) == 0 && !c.closed {
		c.idle.Reset(c.s.cfg.IdleTimeout)
	}
	var stranded int64
	for _, b := range st.in {
		stranded += int64(len(b))
		putChunk(b)
	}
	st.in = nil
	c.mu.Unlock()
	// Bytes a reset or refused stream never passed on would otherwise
	// shrink the connection's window for good.
	if stranded > 0 {
		c.consumed(nil, stranded)
	}
	if last {
		c.closeWrite()
	}
	c.wg.Done()
}
