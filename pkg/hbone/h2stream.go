package hbone

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2stream is one CONNECT stream's HTTP/2 state. Its fields are guarded by
// the connection's mu; cond wakes its goroutines for data, window or reset.
type h2stream struct {
	c    *h2conn
	id   uint32
	cond sync.Cond
	// ctx ends when the stream is reset, so that its authorization and
	// dial stop with it.
	ctx    context.Context
	cancel context.CancelFunc

	in         [][]byte // DATA received, not yet written to the destination
	recvWin    int64    // what the peer may still send on this stream
	unacked    int64
	sendWin    int64
	remoteDone bool // the source's END_STREAM
	localDone  bool // our END_STREAM
	isReset    bool // RST_STREAM sent or received, or the connection died
	up         net.Conn
}

// queue copies a frame's payload out of the Framer's reused buffer, into
// the spare room of the last chunk first: the window counts payload bytes,
// so were each frame given a chunk of its own, 1-byte frames would pin a
// thousand times the window. This way every chunk but the last is full.
// Call with c.mu held.
func (st *h2stream) queue(p []byte) {
	if k := len(st.in) - 1; k >= 0 {
		tail := st.in[k]
		n := min(len(p), cap(tail)-len(tail))
		st.in[k] = append(tail, p[:n]...)
		p = p[n:]
	}
	if len(p) > 0 {
		st.in = append(st.in, chunkOf(p))
	}
}

// chunkOf copies p into a pooled chunk.
func chunkOf(p []byte) []byte {
	pool := &bufPools[0]
	if len(p) > bufSizes[0] {
		pool = &bufPools[1] // frames are at most readFrameSize, 16 KiB
	}
	b := pool.Get().(*[]byte)
	return append((*b)[:0], p...)
}

func putChunk(b []byte) {
	b = b[:cap(b)]
	for i, n := range bufSizes {
		if len(b) == n {
			bufPools[i].Put(&b)
			return
		}
	}
}

// writeTo passes the source's bytes to dst until END_STREAM (nil) or a
// reset or write failure (an error), returning the bytes written.
func (st *h2stream) writeTo(dst net.Conn) (int64, error) {
	c := st.c
	var total int64
	for {
		c.mu.Lock()
		for len(st.in) == 0 && !st.remoteDone && !st.isReset {
			st.cond.Wait()
		}
		if st.isReset {
			c.mu.Unlock()
			return total, errStreamReset
		}
		chunks := st.in
		st.in = nil
		c.mu.Unlock()
		if len(chunks) == 0 {
			return total, nil // remoteDone and everything written
		}
		var n int64
		for _, b := range chunks {
			n += int64(len(b))
		}
		// One writev for all that arrived since the last write.
		bufs := net.Buffers(append([][]byte(nil), chunks...))
		w, err := bufs.WriteTo(dst)
		total += w
		for _, b := range chunks {
			putChunk(b)
		}
		if err != nil {
			// The stream is over, but the bytes still count against
			// the connection's window until given back.
			c.consumed(nil, n)
			return total, err
		}
		c.consumed(st, n)
	}
}

// readFrom sends what src yields as DATA, and END_STREAM at its EOF. It
// returns the bytes sent and nil at EOF, or the error that stopped it.
func (st *h2stream) readFrom(src io.Reader) (int64, error) {
	g := newGrowBuf()
	defer g.release()
	var total int64
	for {
		n, rerr := src.Read(*g.b)
		if n > 0 {
			if err := st.send((*g.b)[:n], false); err != nil {
				return total, err
			}
			total += int64(n)
			g.observe(n)
		}
		if rerr == io.EOF {
			return total, st.send(nil, true)
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

// send writes p as DATA within the peer's windows, ending our half when end.
func (st *h2stream) send(p []byte, end bool) error {
	c := st.c
	for {
		c.mu.Lock()
		for len(p) > 0 && !st.isReset && !c.closed && (st.sendWin <= 0 || c.sendWin <= 0) {
			st.cond.Wait()
		}
		if st.isReset || c.closed {
			c.mu.Unlock()
			return errStreamReset
		}
		n := min(int64(len(p)), st.sendWin, c.sendWin, batchSize)
		st.sendWin -= n
		c.sendWin -= n
		frame := c.peerFrame
		c.mu.Unlock()

		chunk := p[:n]
		p = p[n:]
		last := end && len(p) == 0
		if err := st.writeFrames(func(fr *http2.Framer) error {
			for len(chunk) > frame {
				if err := fr.WriteData(st.id, false, chunk[:frame]); err != nil {
					return err
				}
				chunk = chunk[frame:]
			}
			return fr.WriteData(st.id, last, chunk)
		}, last); err != nil {
			return err
		}
		if len(p) == 0 {
			return nil
		}
	}
}

// writeFrames writes this stream's frames unless it has been reset, so no
// frame follows our RST_STREAM. ending marks our half closed.
func (st *h2stream) writeFrames(fn func(*http2.Framer) error, ending bool) error {
	c := st.c
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	dead := st.isReset || c.closed
	if !dead && ending {
		st.localDone = true
	}
	c.mu.Unlock()
	if dead {
		return errStreamReset
	}
	if err := fn(c.fr); err != nil {
		c.out.reset()
		return err
	}
	return c.flushLocked()
}

// writeHeaders sends the response's status and fields.
func (st *h2stream) writeHeaders(status int, fields [][2]string, end bool) error {
	c := st.c
	return st.writeFrames(func(fr *http2.Framer) error {
		c.hbuf.Reset()
		c.enc.WriteField(hpackField(":status", itoa(status)))
		for _, f := range fields {
			c.enc.WriteField(hpackField(f[0], f[1]))
		}
		return fr.WriteHeaders(http2.HeadersFrameParam{
			StreamID: st.id, BlockFragment: c.hbuf.Bytes(), EndStream: end, EndHeaders: true,
		})
	}, end)
}

// reset ends the stream with RST_STREAM, unless it has already ended.
func (st *h2stream) reset(code http2.ErrCode) {
	c := st.c
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	skip := st.isReset || c.closed || (st.localDone && st.remoteDone)
	if !skip && !st.remoteDone {
		c.noteResetLocked(st.id)
	}
	up := st.stop()
	c.mu.Unlock()
	if up != nil {
		Abort(up)
	}
	if skip {
		return
	}
	c.fr.WriteRSTStream(st.id, code)
	c.flushLocked()
}

// abort ends the stream without a frame: the peer reset it, or the
// connection is gone.
func (st *h2stream) abort() {
	c := st.c
	c.mu.Lock()
	up := st.stop()
	c.mu.Unlock()
	if up != nil {
		Abort(up)
	}
}

// Abort closes c, a relay's end whose other end did not finish cleanly:
// with a TCP reset where c is a TCP connection, as RFC 9113 §8.5 asks of
// a tunnel's destination, since a FIN would tell the peer that what it has
// read is all there is. A tunnel's own Close already resets its stream.
func Abort(c net.Conn) {
	if l, ok := c.(interface{ SetLinger(sec int) error }); ok {
		l.SetLinger(0)
	}
	c.Close()
}

// stop marks the stream reset, wakes its goroutines and cancels its
// context, and returns the destination's connection for the caller to
// close outside mu. Call with c.mu held.
func (st *h2stream) stop() net.Conn {
	st.isReset = true
	st.cond.Broadcast()
	st.cancel()
	return st.up
}

// setUpstream records the destination's connection so a reset closes it;
// it reports false when the stream has already been reset.
func (st *h2stream) setUpstream(up net.Conn) bool {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	if st.isReset {
		return false
	}
	st.up = up
	return true
}

// finished reports whether both halves ended cleanly.
func (st *h2stream) finished() bool {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	return st.localDone && st.remoteDone && !st.isReset
}

func hpackField(name, value string) hpack.HeaderField {
	return hpack.HeaderField{Name: name, Value: value}
}

func itoa(n int) string { return strconv.Itoa(n) }
