package loadtest

import (
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// subscription is the client's state of one type.
type subscription struct {
	url      string
	wildcard bool
	on       bool
	names    map[string]*subName // not for wildcards
	nGot     int                 // names received on the current stream
	sent     map[string]bool     // delta: names the server was told about
	// wire is resource_names encoded (field 3 of DiscoveryRequest, sorted),
	// rebuilt only when the set of names changes: a SotW client repeats
	// thousands of EDS names in every ACK, and sorting and marshalling them
	// each time made the tool cost more than the server.
	wire      []byte
	wireOK    bool
	responded bool // a response arrived on the current stream
	version   string
	nonce     string
}

// subName is one subscribed name. It is a pointer so that a name found by
// string(bytes), which does not allocate, can be marked received: a map
// assignment would allocate the key, 20,000 times per EDS client and stream.
type subName struct {
	refs int
	got  bool // received on the current stream
}

// begin is the first request of the first stream.
func (c *Client) begin() []pending {
	if c.proxyless {
		lds := c.types[ListenerType]
		lds.on = true
		for _, t := range c.targets {
			c.ref(ListenerType, t, 1)
		}
		return []pending{c.request(lds, "")}
	}
	cds := c.types[ClusterType]
	cds.on, cds.wildcard = true, true
	return []pending{c.request(cds, "")}
}

// resubscribe asks a new stream for every subscribed type, in Envoy's
// order: clusters and their endpoints before listeners and their routes.
func (c *Client) resubscribe() []pending {
	var out []pending
	for _, u := range []string{ClusterType, EndpointType, ListenerType, RouteType} {
		if sub := c.types[u]; sub.on {
			out = append(out, c.request(sub, ""))
		}
	}
	return out
}

// request is a request for sub's current subscription: SotW repeats the
// full set of names with the last accepted version; delta sends the
// difference to what the server was told.
func (c *Client) request(sub *subscription, nonce string) pending {
	p := pending{url: sub.url, version: sub.version, nonce: nonce, wildcard: sub.wildcard}
	if !c.delta {
		if !sub.wildcard {
			p.namesWire = sub.namesWire()
		}
		return p
	}
	if sub.wildcard {
		// The first delta request of a wildcard subscription names nothing.
		return p
	}
	for n := range sub.names {
		if !sub.sent[n] {
			p.subscribe = append(p.subscribe, n)
			sub.sent[n] = true
		}
	}
	for n := range sub.sent {
		if sub.names[n] == nil {
			p.unsubscribe = append(p.unsubscribe, n)
			delete(sub.sent, n)
		}
	}
	slices.Sort(p.subscribe)
	slices.Sort(p.unsubscribe)
	return p
}

// changed reports whether a delta subscription has increments to send.
func (c *Client) changed(sub *subscription) bool {
	if !sub.on || sub.wildcard {
		return false
	}
	for n := range sub.names {
		if !sub.sent[n] {
			return true
		}
	}
	for n := range sub.sent {
		if sub.names[n] == nil {
			return true
		}
	}
	return false
}

// namesWire is the cached encoding of the subscribed names; the returned
// slice is never modified afterwards.
func (sub *subscription) namesWire() []byte {
	if !sub.wireOK {
		names := sortedKeys(sub.names)
		size := 0
		for _, n := range names {
			size += protowire.SizeTag(reqResourceNames) + protowire.SizeBytes(len(n))
		}
		b := make([]byte, 0, size)
		for _, n := range names {
			b = protowire.AppendTag(b, reqResourceNames, protowire.BytesType)
			b = protowire.AppendString(b, n)
		}
		sub.wire, sub.wireOK = b, true
	}
	return sub.wire
}

func sortedKeys(m map[string]*subName) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (c *Client) ref(url, name string, delta int) {
	sub := c.types[url]
	sub.on = true
	n := sub.names[name]
	before := 0
	if n != nil {
		before = n.refs
	}
	after := before + delta
	if (before > 0) != (after > 0) {
		sub.wireOK = false
	}
	switch {
	case after <= 0 && n != nil:
		if n.got {
			sub.nGot--
		}
		delete(sub.names, name)
	case after > 0 && n == nil:
		sub.names[name] = &subName{refs: after}
	case after > 0:
		n.refs = after
	}
}

// handle applies a response and returns the requests it causes: the
