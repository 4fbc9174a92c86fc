package loadtest

import (
	"bytes"
	"hash/maphash"
	"slices"
	"time"
)

// hashSeed hashes a resource's bytes: a client tells the resources a response
// changed from those it repeats by their hashes, without decoding either.
var hashSeed = maphash.MakeSeed()

// clusterEntry is a cluster the client holds, and what it fetches for it.
type clusterEntry struct {
	edsName string
	hash    uint64
	warming bool
	gen     uint64 // the last response that held it
}

// listenerEntry is a listener the client holds, and the route
// configurations it names.
type listenerEntry struct {
	hash   uint64
	routes []string
	gen    uint64
}

func (c *Client) setWarming(e *clusterEntry, w bool) {
	if e.warming != w {
		e.warming = w
		if w {
			c.nWarming++
		} else {
			c.nWarming--
		}
	}
}

// re-requests of dependent types first, then the ACK.
func (c *Client) handle(r *response) []pending {
	sub := c.types[r.typeURL]
	if sub == nil || !sub.on {
		return nil // Envoy ignores types it did not ask for.
	}
	sub.responded, sub.nonce, sub.version = true, r.nonce, r.version
	if !sub.wildcard {
		for _, res := range r.resources {
			if n := sub.names[string(res.name)]; n != nil && !n.got {
				n.got = true
				sub.nGot++
			}
		}
	}
	var out []pending
	switch r.typeURL {
	case ClusterType:
		out = c.onClusters(r)
	case EndpointType:
		c.onEndpoints(r)
	case ListenerType:
		out = c.onListeners(r)
	case RouteType:
		out = c.onRoutes(r)
	}
	out = append(out, c.ack(sub, r.nonce))
	if !c.proxyless && !c.cdsInit && c.types[ClusterType].responded && c.warmingCount() == 0 {
		// Cluster initialization is over: LDS starts, after the ACK.
		c.cdsInit = true
		lds := c.types[ListenerType]
		lds.on, lds.wildcard = true, true
		out = append(out, c.request(lds, ""))
	}
	if c.fullAt.IsZero() && c.full() {
		c.fullAt = time.Now()
	}
	return out
}

func (c *Client) ack(sub *subscription, nonce string) pending {
	p := c.request(sub, nonce)
	p.ack = true
	return p
}

func (c *Client) warmingCount() int { return c.nWarming }

// full reports whether the current stream delivered everything subscribed:
// the wildcard types answered, every named resource received, and for
// Envoy, listeners subscribed and no cluster warming.
func (c *Client) full() bool {
	if !c.proxyless && !c.types[ListenerType].on {
		return false
	}
	for _, sub := range c.types {
		if sub.wildcard {
			if !sub.responded {
				return false
			}
			continue
		}
		// nGot counts subscribed names only (ref uncounts a name it
		// drops), so equal counts mean all arrived.
		if sub.nGot < len(sub.names) {
			return false
		}
	}
	return c.warmingCount() == 0
}

func (c *Client) onClusters(r *response) []pending {
	c.gen++
	c.reserve(len(r.resources))
	edsChanged := false
	for _, res := range r.resources {
		// Most clusters of a response are unchanged: a lookup and a hash,
		// no decoding and no allocation.
		h := maphash.Bytes(hashSeed, res.value)
		e := c.clusters[string(res.name)]
		if e != nil {
			e.gen = c.gen
			if e.hash == h {
				continue
			}
		}
		ci, err := skimCluster(res.value)
		if err != nil {
			continue
		}
		name := string(res.name)
		if e == nil {
			e = &clusterEntry{gen: c.gen}
			c.clusters[name] = e
		}
		if e.edsName != string(ci.edsName) {
			if e.edsName != "" {
				c.unrefEDS(name, e.edsName)
			}
			e.edsName = ""
			if len(ci.edsName) > 0 {
				// Istio names a cluster's endpoints after the cluster: one
				// string serves both, in every map that keys on them.
				e.edsName = name
				if !bytes.Equal(ci.edsName, res.name) {
					e.edsName = string(ci.edsName)
				}
				c.byEDS[e.edsName] = append(c.byEDS[e.edsName], name)
				c.ref(EndpointType, e.edsName, 1)
			}
		}
		e.hash = h
		// grpc-go uses a cluster at once; Envoy warms it until its load
		// assignment arrives.
		c.setWarming(e, e.edsName != "" && !c.proxyless)
		if e.edsName != "" {
			edsChanged = true
		}
		c.checkCluster(name, res.value, e)
	}
	removed := r.removed
	if !c.delta && !c.proxyless {
		// A SotW wildcard response holds every cluster: the rest are gone.
		for name, e := range c.clusters {
			if e.gen != c.gen {
				removed = append(removed, name)
			}
		}
	}
	for _, name := range removed {
		if e := c.clusters[name]; e != nil {
			if e.edsName != "" {
				c.unrefEDS(name, e.edsName)
				edsChanged = true
			}
			c.setWarming(e, false)
			delete(c.clusters, name)
		}
	}
	eds := c.types[EndpointType]
	if c.delta {
		if c.changed(eds) {
			return []pending{c.request(eds, eds.nonce)}
		}
		return nil
	}
	if edsChanged && eds.on {
		return []pending{c.request(eds, eds.nonce)}
	}
	return nil
}

// reserve sizes the maps that the first response of n clusters fills: grown
// one cluster at a time, they were a fifth of a client's CPU in a connect
// storm. Maps that already hold something are left as they are.
func (c *Client) reserve(n int) {
	if len(c.clusters) > 0 {
		return
	}
	c.clusters = make(map[string]*clusterEntry, n)
	c.byEDS = make(map[string][]string, n)
	if eds := c.types[EndpointType]; len(eds.names) == 0 {
		eds.names = make(map[string]*subName, n)
		if c.delta { // only delta tells the server names one by one
			eds.sent = make(map[string]bool, n)
		}
	}
}

func (c *Client) unrefEDS(cluster, eds string) {
	c.byEDS[eds] = slices.DeleteFunc(c.byEDS[eds], func(s string) bool { return s == cluster })
	if len(c.byEDS[eds]) == 0 {
		delete(c.byEDS, eds)
	}
	c.ref(EndpointType, eds, -1)
}

func (c *Client) onEndpoints(r *response) {
	for _, res := range r.resources {
		if c.nWarming > 0 {
			for _, cl := range c.byEDS[string(res.name)] {
				if e := c.clusters[cl]; e != nil && e.warming {
					c.setWarming(e, false)
					c.checkWarm(cl)
				}
			}
		}
		if x := c.expect; x != nil && x.kind == expectEndpoint && x.at.IsZero() && string(res.name) == x.name {
			if ok, _ := claHasAddress(res.value, x.addr); ok {
				c.satisfy()
			}
		}
	}
}

func (c *Client) onListeners(r *response) []pending {
	c.gen++
	routesChanged := false
	for _, res := range r.resources {
		h := maphash.Bytes(hashSeed, res.value)
		e := c.listeners[string(res.name)]
		if e != nil {
			e.gen = c.gen
			if e.hash == h {
				continue
			}
		}
		routes, err := listenerRoutes(res.value)
		if err != nil {
			continue
		}
		if e == nil {
			e = &listenerEntry{gen: c.gen}
			c.listeners[string(res.name)] = e
		}
		for _, rt := range e.routes {
			c.ref(RouteType, rt, -1)
		}
		for _, rt := range routes {
			c.ref(RouteType, rt, 1)
		}
		e.hash, e.routes = h, routes
		routesChanged = true
	}
	removed := r.removed
	if !c.delta && !c.proxyless {
		for name, e := range c.listeners {
			if e.gen != c.gen {
				removed = append(removed, name)
			}
		}
	}
	for _, name := range removed {
		if e := c.listeners[name]; e != nil {
			for _, rt := range e.routes {
				c.ref(RouteType, rt, -1)
			}
			delete(c.listeners, name)
			routesChanged = true
		}
	}
	rds := c.types[RouteType]
	if c.delta {
		if c.changed(rds) {
			return []pending{c.request(rds, rds.nonce)}
		}
		return nil
	}
	if routesChanged && rds.on {
		return []pending{c.request(rds, rds.nonce)}
	}
	return nil
}

// onRoutes follows a proxyless client's routes to the clusters they name;
// Envoy fetches its clusters by wildcard and needs nothing from them.
func (c *Client) onRoutes(r *response) []pending {
	if !c.proxyless {
		return nil
	}
	changed := false
	for _, res := range r.resources {
		h := maphash.Bytes(hashSeed, res.value)
		if old, ok := c.routes[string(res.name)]; ok && old == h {
			continue
		}
		cls, err := routeClusters(res.value)
		if err != nil {
			continue
		}
		name := string(res.name)
		for _, cl := range c.routeRefs[name] {
			c.ref(ClusterType, cl, -1)
		}
		for _, cl := range cls {
			c.ref(ClusterType, cl, 1)
		}
		c.routes[name], c.routeRefs[name] = h, cls
		changed = true
	}
	if !changed {
		return nil
	}
	cds := c.types[ClusterType]
	return []pending{c.request(cds, cds.nonce)}
}
