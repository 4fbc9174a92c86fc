package loadtest

import "time"

// expectKind is what a phase waits for a client to see.
type expectKind int

const (
	// expectEndpoint: the load assignment name holds address addr.
	expectEndpoint expectKind = iota
	// expectMaxRequests: cluster name carries max_requests, and is serving
	// (warm) with it.
	expectMaxRequests
	// expectCluster: cluster name exists and is serving.
	expectCluster
)

// expectation is one client's wait for one change. at is set once, when
// the client first holds the change; seen marks a cluster that arrived
// changed but still warms.
type expectation struct {
	kind        expectKind
	name        string
	addr        string
	maxRequests uint32
	seen        bool
	at          time.Time
	notify      func(time.Time)
	// responses counts the responses of each type between Expect and at:
	// the pushes this change cost this client.
	startCounts map[string]int
	pushes      map[string]int
}

// Expect arms an expectation; notify runs (under the client's lock, so it
// must not block or call back) when the client holds the change.
func (c *Client) Expect(kind expectKind, name, addr string, maxRequests uint32, notify func(time.Time)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	start := make(map[string]int, len(c.received))
	for k, v := range c.received {
		start[k] = v
	}
	c.expect = &expectation{kind: kind, name: name, addr: addr, maxRequests: maxRequests, notify: notify, startCounts: start}
}

// Pushes returns, for the last expectation, the responses of each type the
// client received until it held the change (or until now, if it never did).
func (c *Client) Pushes() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	x := c.expect
	if x == nil {
		return nil
	}
	if x.pushes != nil {
		return x.pushes
	}
	return diffCounts(c.received, x.startCounts)
}

func diffCounts(now, before map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range now {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

func (c *Client) satisfy() {
	x := c.expect
	x.at = time.Now()
	x.pushes = diffCounts(c.received, x.startCounts)
	if x.notify != nil {
		x.notify(x.at)
	}
}

// checkCluster looks at a new or changed cluster for the expectation.
func (c *Client) checkCluster(name string, value []byte, e *clusterEntry) {
	x := c.expect
	if x == nil || !x.at.IsZero() || x.name != name {
		return
	}
	switch x.kind {
	case expectMaxRequests:
		n, err := clusterMaxRequests(value)
		x.seen = err == nil && n == x.maxRequests
	case expectCluster:
		x.seen = true
	default:
		return
	}
	if x.seen && !e.warming {
		c.satisfy()
	}
}

// checkWarm is called when a cluster finishes warming.
func (c *Client) checkWarm(name string) {
	if x := c.expect; x != nil && x.at.IsZero() && x.seen && x.name == name {
		c.satisfy()
	}
}
