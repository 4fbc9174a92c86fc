package hbone

import (
	"crypto/tls"
	"net"
	"sync"
)

// crypto/tls writes each record (at most 16 KiB) with its own syscall, and
// HTTP/2 flushes after every DATA frame, so a frame of 16 KiB left as two
// syscalls: the full record and a 9-byte one for the frame header's
// overflow. Over a veth pair the per-packet cost of those small writes, not
// the bytes, was what bounded a bulk tunnel. recordBatcher sits under TLS
// and, for the length of one write from HTTP/2, gathers the records it
// produces so they reach the socket in one syscall.
type recordBatcher struct {
	net.Conn
	mu     sync.Mutex
	corked int
	buf    *[]byte // only while corked: an idle connection holds none
}

// batchSize bounds one gathered write; a larger TLS write is sent in
// batchSize pieces.
const batchSize = 128 << 10

var batchPool = sync.Pool{New: func() any { b := make([]byte, 0, batchSize); return &b }}

func (b *recordBatcher) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.corked == 0 {
		// Handshake messages, alerts and key updates go out at once.
		return b.Conn.Write(p)
	}
	if b.buf == nil {
		b.buf = batchPool.Get().(*[]byte)
	}
	if len(*b.buf)+len(p) > batchSize {
		if err := b.flushLocked(); err != nil {
			return 0, err
		}
		if len(p) >= batchSize {
			return b.Conn.Write(p)
		}
	}
	*b.buf = append(*b.buf, p...)
	return len(p), nil
}

func (b *recordBatcher) cork() {
	b.mu.Lock()
	b.corked++
	b.mu.Unlock()
}

// uncork sends what was gathered once the outermost write is done, and
// returns the buffer to the pool.
func (b *recordBatcher) uncork() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.corked--
	if b.corked > 0 || b.buf == nil {
		return nil
	}
	err := b.flushLocked()
	batchPool.Put(b.buf)
	b.buf = nil
	return err
}

func (b *recordBatcher) flushLocked() error {
	if len(*b.buf) == 0 {
		return nil
	}
	_, err := b.Conn.Write(*b.buf)
	*b.buf = (*b.buf)[:0]
	return err
}

// batchedTLS is the TLS connection HTTP/2 runs on: each of its writes is
// sent as few syscalls as its records allow. It keeps *tls.Conn's
// ConnectionState, which both HTTP/2 ends look for.
type batchedTLS struct {
	*tls.Conn
	b *recordBatcher
}

// newBatchedTLS wraps raw for TLS with cfg; wrap is tls.Client or tls.Server.
func newBatchedTLS(raw net.Conn, cfg *tls.Config, wrap func(net.Conn, *tls.Config) *tls.Conn) *batchedTLS {
	b := &recordBatcher{Conn: raw}
	return &batchedTLS{Conn: wrap(b, cfg), b: b}
}

func (c *batchedTLS) Write(p []byte) (int, error) {
	c.b.cork()
	n, err := c.Conn.Write(p)
	if ferr := c.b.uncork(); err == nil {
		err = ferr
	}
	if err != nil {
		// Bytes gathered but not sent were not written.
		n = 0
	}
	return n, err
}
