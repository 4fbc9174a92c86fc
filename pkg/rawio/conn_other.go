//go:build !linux || race

package rawio

import (
	"net"
	"time"
)

// Enabled says whether Listener wraps connections: on Linux, outside the
// race detector.
const Enabled = false

func wrap(tc *net.TCPConn, _ time.Duration) (net.Conn, error) { return tc, nil }
