package hbone

import (
	"sync"
	"sync/atomic"
)

// Direction says which side of a tunnel an event belongs to.
type Direction int

const (
	// Inbound tunnels arrive at a Server.
	Inbound Direction = iota
	// Outbound tunnels leave through a Dialer.
	Outbound
)

func (d Direction) String() string {
	if d == Inbound {
		return "inbound"
	}
	return "outbound"
}

// Reason names why a tunnel or connection was refused, for metrics and logs.
type Reason string

// The refusal reasons. Each maps to what the peer saw.
const (
	ReasonHandshake Reason = "handshake" // TLS failed: no or untrusted certificate, no h2, no server certificate
	ReasonMethod    Reason = "method"    // not CONNECT: 405
	ReasonAuthority Reason = "authority" // :authority is not ip:port: 400
	ReasonPolicy    Reason = "policy"    // the caller's Authorize refused: 403
	ReasonDial      Reason = "dial"      // the destination did not answer: 503
	ReasonStatus    Reason = "status"    // outbound: the server answered other than 200
	ReasonTransport Reason = "transport" // outbound: the HTTP/2 connection failed
	ReasonDraining  Reason = "draining"  // the server is shutting down
	ReasonHeaders   Reason = "headers"   // the request's fields exceed their limit: 431
)

// Metrics receives the events a node proxy exports. Implementations must be
// safe for concurrent use and fast: they are called on the data path.
// Prometheus wiring belongs to the caller; Counters is a ready-made one.
type Metrics interface {
	// ConnOpened and ConnClosed count mutual-TLS connections (HTTP/2 carriers).
	ConnOpened(Direction)
	ConnClosed(Direction)
	// StreamOpened counts a tunnel that got 200; StreamClosed reports its
	// bytes, sent toward the destination and received from it.
	StreamOpened(Direction)
	StreamClosed(d Direction, sent, received int64)
	// Refused counts a refusal, with its reason.
	Refused(Direction, Reason)
}

// Counters is a Metrics of plain counters, for tests and /debug. Index the
// arrays by Direction.
type Counters struct {
	Conns, OpenConns     [2]atomic.Int64
	Streams, OpenStreams [2]atomic.Int64
	Sent, Received       [2]atomic.Int64

	mu      sync.Mutex // guards refused; refusals are rare, so a lock is cheap enough
	refused map[refusalKey]int64
}

type refusalKey struct {
	d Direction
	r Reason
}

func (c *Counters) ConnOpened(d Direction) { c.Conns[d].Add(1); c.OpenConns[d].Add(1) }
func (c *Counters) ConnClosed(d Direction) { c.OpenConns[d].Add(-1) }
func (c *Counters) StreamOpened(d Direction) {
	c.Streams[d].Add(1)
	c.OpenStreams[d].Add(1)
}
func (c *Counters) StreamClosed(d Direction, sent, received int64) {
	c.OpenStreams[d].Add(-1)
	c.Sent[d].Add(sent)
	c.Received[d].Add(received)
}

func (c *Counters) Refused(d Direction, r Reason) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refused == nil {
		c.refused = make(map[refusalKey]int64)
	}
	c.refused[refusalKey{d, r}]++
}

// Refusals returns how many refusals of the reason were counted.
func (c *Counters) Refusals(d Direction, r Reason) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refused[refusalKey{d, r}]
}

// nopMetrics stands in when the caller gives none.
type nopMetrics struct{}

func (nopMetrics) ConnOpened(Direction)                 {}
func (nopMetrics) ConnClosed(Direction)                 {}
func (nopMetrics) StreamOpened(Direction)               {}
func (nopMetrics) StreamClosed(Direction, int64, int64) {}
func (nopMetrics) Refused(Direction, Reason)            {}
