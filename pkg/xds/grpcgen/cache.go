package grpcgen

import "sync"

// versionCache holds values derived from one push context version. It keeps
// the two most recent versions, so connections that are still finishing a
// push with the previous context neither evict nor thrash the new one's
// entries; anything older is dropped.
type versionCache struct {
	mu   sync.Mutex
	gens [2]*cacheGeneration
}

type cacheGeneration struct {
	version string
	entries sync.Map
}

func (c *versionCache) generation(version string) *cacheGeneration {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range c.gens {
		if g != nil && g.version == version {
			return g
		}
	}
	g := &cacheGeneration{version: version}
	c.gens[1] = c.gens[0]
	c.gens[0] = g
	return g
}
