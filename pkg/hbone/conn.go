package hbone

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Conn is the source end of one tunnel: a net.Conn over an HTTP/2 CONNECT
// stream.
type Conn struct {
	body          io.ReadCloser  // the response: bytes from the destination
	pw            *io.PipeWriter // the request body: bytes to the destination
	local, remote net.Addr
	m             Metrics

	sent, received atomic.Int64
	closeOnce      sync.Once
}

// ErrDeadlineUnsupported is returned by the deadline setters: an HTTP/2
// stream's reads and writes cannot be interrupted without resetting it.
var ErrDeadlineUnsupported = errors.New("hbone: deadlines are not supported on a tunnel; close it instead")

func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.body.Read(p)
	c.received.Add(int64(n))
	return n, err
}

func (c *Conn) Write(p []byte) (int, error) {
	n, err := c.pw.Write(p)
	c.sent.Add(int64(n))
	if errors.Is(err, io.ErrClosedPipe) {
		err = net.ErrClosed
	}
	return n, err
}

// CloseWrite ends the source's half (END_STREAM); the destination sees EOF
// and may go on answering.
func (c *Conn) CloseWrite() error { return c.pw.Close() }

// Close ends both halves. Before the destination has finished it resets the
// stream.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.pw.CloseWithError(net.ErrClosed)
		c.body.Close()
		c.m.StreamClosed(Outbound, c.sent.Load(), c.received.Load())
	})
	return nil
}

// LocalAddr is the local address of the carrying TLS connection.
func (c *Conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr is the tunnel's destination, not the node it runs through.
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

func (c *Conn) SetDeadline(time.Time) error      { return ErrDeadlineUnsupported }
func (c *Conn) SetReadDeadline(time.Time) error  { return ErrDeadlineUnsupported }
func (c *Conn) SetWriteDeadline(time.Time) error { return ErrDeadlineUnsupported }
