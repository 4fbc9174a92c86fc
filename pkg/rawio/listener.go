package rawio

import (
	"net"
	"time"
)

// Listener returns l with each TCP connection it accepts wrapped to read and
// write with raw system calls, or l itself where that is off (Enabled).
// Apart from how they reach the kernel, the connections behave as
// *net.TCPConn's: the same waiting, deadlines, close and errors.
//
// userTimeout is the TCP_USER_TIMEOUT to set on each connection: gRPC sets
// it from its keepalive timeout, but only on a *net.TCPConn, which the
// wrapper hides. Zero leaves the kernel's default.
func Listener(l net.Listener, userTimeout time.Duration) net.Listener {
	if !Enabled {
		return l
	}
	return &listener{Listener: l, userTimeout: userTimeout}
}

type listener struct {
	net.Listener
	userTimeout time.Duration
}

// Accept wraps TCP connections and passes any other kind unchanged. A
// connection that cannot be wrapped is handed out as it is, so that gRPC
// sets its options, and reports a failure, itself.
func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	if w, err := wrap(tc, l.userTimeout); err == nil {
		return w, nil
	}
	return tc, nil
}
