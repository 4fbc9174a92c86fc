//go:build linux && !race

package rawio

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Enabled says whether Listener wraps connections: on Linux, outside the
// race detector.
const Enabled = true

// conn is a TCP connection whose Read and Write are raw read(2) and
// write(2) on its non-blocking socket. Waiting for the socket, deadlines
// and closing are the net package's, through syscall.RawConn: a call that
// would block returns false to it, and it parks the goroutine on the
// network poller until the socket is ready, as net.TCPConn's own Read and
// Write do. Everything else is the embedded *net.TCPConn's.
type conn struct {
	*net.TCPConn
	raw syscall.RawConn

	// The state of the call in progress, for the callbacks below, which
	// are bound once so that a call allocates nothing.
	rmu    sync.Mutex
	rbuf   []byte
	rn     int
	rerrno syscall.Errno
	readFn func(fd uintptr) bool

	wmu     sync.Mutex
	wbuf    []byte
	wn      int
	werrno  syscall.Errno
	writeFn func(fd uintptr) bool
}

func wrap(tc *net.TCPConn, userTimeout time.Duration) (net.Conn, error) {
	raw, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	if userTimeout > 0 {
		var serr error
		err := raw.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(userTimeout/time.Millisecond))
		})
		if err = errors.Join(err, serr); err != nil {
			return nil, err
		}
	}
	c := &conn{TCPConn: tc, raw: raw}
	c.readFn, c.writeFn = c.readSome, c.writeAll
	return c, nil
}

// Read reads as net.TCPConn does: at most len(b) bytes once some are
// there, io.EOF once the peer has closed.
func (c *conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rbuf, c.rn, c.rerrno = b, 0, 0
	err := c.raw.Read(c.readFn)
	c.rbuf = nil
	if err := c.callError("read", err, c.rerrno); err != nil {
		return 0, err
	}
	if c.rn == 0 {
		return 0, io.EOF
	}
	return c.rn, nil
}

// Write writes all of b, as net.TCPConn does, waiting for the socket as
// often as it fills.
func (c *conn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf, c.wn, c.werrno = b, 0, 0
	err := c.raw.Write(c.writeFn)
	c.wbuf = nil
	return c.wn, c.callError("write", err, c.werrno)
}

// readSome is one read(2); false asks RawConn to wait for data.
func (c *conn) readSome(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rbuf[0])), uintptr(len(c.rbuf)))
		switch e {
		case 0:
			c.rn = int(n)
			return true
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			c.rerrno = e
			return true
		}
	}
}

// writeAll writes until the buffer is sent or the socket is full; false
// asks RawConn to wait for room.
func (c *conn) writeAll(fd uintptr) bool {
	for c.wn < len(c.wbuf) {
		p := c.wbuf[c.wn:]
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		switch e {
		case 0:
			c.wn += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			c.werrno = e
			return true
		}
	}
	return true
}

// callError is the error of a Read or Write (op) whose RawConn call
// returned err and whose system call failed with errno, or nil. It is the
// error net.TCPConn returns for the same failure, so that callers' checks
// (net.ErrClosed, os.ErrDeadlineExceeded, syscall errnos, net.Error's
// Timeout) see no difference.
func (c *conn) callError(op string, err error, errno syscall.Errno) error {
	switch {
	case err != nil:
		// RawConn's own wrapping ("raw-read", "raw-write") comes off.
		var raw *net.OpError
		if errors.As(err, &raw) {
			err = raw.Err
		}
	case errno != 0:
		err = os.NewSyscallError(op, errno)
	default:
		return nil
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
