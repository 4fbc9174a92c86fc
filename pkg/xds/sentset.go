package xds

import (
	"iter"
	"sync"
)

// generation is one generator run's result for a watch. Identical proxies
// share it (shared.go), and with it what each of their streams would
// otherwise derive from the items on its own: the response hash and an
// index by name, each computed at most once, by whichever stream needs it
// first.
type generation struct {
	items []generated

	hashOnce sync.Once
	hash     uint64

	indexOnce sync.Once
	index     map[string]int32
}

func newGeneration(items []generated) *generation { return &generation{items: items} }

// responseHash is responseHash(g.items, nil).
func (g *generation) responseHash() uint64 {
	g.hashOnce.Do(func() { g.hash = responseHash(g.items, nil) })
	return g.hash
}

// lookup finds the item named name.
func (g *generation) lookup(name string) (generated, bool) {
	g.indexOnce.Do(func() {
		g.index = make(map[string]int32, len(g.items))
		for i, it := range g.items {
			g.index[it.name] = int32(i)
		}
	})
	i, ok := g.index[name]
	if !ok {
		return generated{}, false
	}
	return g.items[i], true
}

// sentSet is what a client holds of one type, as far as the server knows.
// Usually most of it is one complete response, and 50 sidecars were sent
// the same one: so that each stream does not copy 5,000 names into a map
// of its own, the set refers to that shared generation (base) and keeps
// only what this stream was sent or told since (changes).
type sentSet struct {
	base *generation
	// changes override base by name: a held resource, or a tombstone for a
	// base name the client no longer holds.
	changes map[string]sentEntry
	n       int
}

type sentEntry struct {
	sentResource
	gone bool
}

// get returns what the client holds under name.
func (s *sentSet) get(name string) (sentResource, bool) {
	if e, ok := s.changes[name]; ok {
		return e.sentResource, !e.gone
	}
	if s.base != nil {
		if it, ok := s.base.lookup(name); ok {
			return sentResource{version: it.version, resource: it.resource}, true
		}
	}
	return sentResource{}, false
}

// len is how many resources the client holds.
func (s *sentSet) len() int { return s.n }

// is reports whether the client holds exactly g's items.
func (s *sentSet) is(g *generation) bool { return s.base == g && len(s.changes) == 0 }

// reset makes g's items all the client holds.
func (s *sentSet) reset(g *generation) {
	s.base, s.changes, s.n = g, nil, len(g.items)
}

// set records that the client holds r under name.
func (s *sentSet) set(name string, r sentResource) {
	if _, held := s.get(name); !held {
		s.n++
	}
	if s.changes == nil {
		s.changes = map[string]sentEntry{}
	}
	s.changes[name] = sentEntry{sentResource: r}
}

// remove records that the client no longer holds name.
func (s *sentSet) remove(name string) {
	if _, held := s.get(name); !held {
		return
	}
	s.n--
	if s.base != nil {
		if _, inBase := s.base.lookup(name); inBase {
			if s.changes == nil {
				s.changes = map[string]sentEntry{}
			}
			s.changes[name] = sentEntry{gone: true}
			return
		}
	}
	delete(s.changes, name)
}

// clear forgets everything the client held.
func (s *sentSet) clear() { *s = sentSet{} }

// all yields every held resource by name, in no particular order.
func (s *sentSet) all() iter.Seq2[string, sentResource] {
	return func(yield func(string, sentResource) bool) {
		if s.base != nil {
			for _, it := range s.base.items {
				if _, changed := s.changes[it.name]; changed {
					continue
				}
				if !yield(it.name, sentResource{version: it.version, resource: it.resource}) {
					return
				}
			}
		}
		for name, e := range s.changes {
			if !e.gone && !yield(name, e.sentResource) {
				return
			}
		}
	}
}
