package xds

import (
	"iter"
	"slices"
	"sync"
	"weak"

	"google.golang.org/protobuf/types/known/anypb"
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

	// diffs holds changedSince's answers, by base.
	diffs sync.Map // weak.Pointer[generation] -> *diff
}

// diff is changedSince's answer for one base, computed once.
type diff struct {
	once    sync.Once
	changed []int32
}

func newGeneration(items []generated) *generation { return &generation{items: items} }

// responseHash is responseHash(g.items, nil).
func (g *generation) responseHash() uint64 {
	g.hashOnce.Do(func() { g.hash = responseHash(g.items, nil) })
	return g.hash
}

// lookup finds the item named name.
func (g *generation) lookup(name string) (generated, bool) {
	i, ok := g.indexOf(name)
	if !ok {
		return generated{}, false
	}
	return g.items[i], true
}

func (g *generation) indexOf(name string) (int32, bool) {
	g.indexOnce.Do(func() {
		g.index = make(map[string]int32, len(g.items))
		for i, it := range g.items {
			g.index[it.name] = int32(i)
		}
	})
	i, ok := g.index[name]
	return i, ok
}

// changedSince lists, in order, the indexes of g's items that base does not
// hold or holds in another version. When a push reaches 50 sidecars that
// were all sent base, each of them would otherwise look up each of 5,000
// clusters to find the one that changed (a tenth of the control plane's
// CPU under Service churn); the answer is computed once per base. The base
// is held weakly: a generation must not keep the chain of its predecessors
// alive.
func (g *generation) changedSince(base *generation) []int32 {
	// The streams of one push ask at once, so the first computes and the
	// others wait for it: asking and then storing, all 50 computed it.
	v, ok := g.diffs.Load(weak.Make(base))
	if !ok {
		v, _ = g.diffs.LoadOrStore(weak.Make(base), new(diff))
	}
	d := v.(*diff)
	d.once.Do(func() {
		for i, it := range g.items {
			if prev, ok := base.lookup(it.name); !ok || prev.version != it.version {
				d.changed = append(d.changed, int32(i))
			}
		}
	})
	return d.changed
}

// changedOrNamed returns g's items that differ from base, which the client
// holds exactly (nil: it holds nothing), or whose names are in names.
func (g *generation) changedOrNamed(base *generation, names []string) []generated {
	if base == nil {
		return g.items
	}
	idx := g.changedSince(base)
	if len(names) > 0 {
		idx = g.sortedWith(slices.Clone(idx), names)
	}
	return g.itemsAt(idx)
}

// sortedWith adds the indexes of the items named in names to idx, which
// the caller owns, and sorts and de-duplicates the result.
func (g *generation) sortedWith(idx []int32, names []string) []int32 {
	for _, name := range names {
		if i, ok := g.indexOf(name); ok {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	return slices.Compact(idx)
}

// itemsAt returns the items at the sorted indexes idx: g.items itself when
// idx is all of them.
func (g *generation) itemsAt(idx []int32) []generated {
	if len(idx) == len(g.items) {
		return g.items
	}
	out := make([]generated, len(idx))
	for k, i := range idx {
		out[k] = g.items[i]
	}
	return out
}

// changedIn is gen.changedOrNamed for a client that holds s, a base with
// changes of its own on top, as a stream does after partial EDS pushes:
// what differs from base comes from the diff that every stream sent base
// shares, and only the names this stream changed since are looked at on
// their own. Comparing each of 5,000 items instead was a tenth of the
// control plane's CPU under DestinationRule churn. s.base must be set.
func (s *sentSet) changedIn(gen *generation, names []string) []generated {
	var idx []int32
	for _, i := range gen.changedSince(s.base) {
		if _, own := s.changes[gen.items[i].name]; !own {
			idx = append(idx, i)
		}
	}
	for name, e := range s.changes {
		if i, ok := gen.indexOf(name); ok && (e.gone || e.version != gen.items[i].version) {
			idx = append(idx, i)
		}
	}
	return gen.itemsAt(gen.sortedWith(idx, names))
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

// sentResource is what a delta stream was sent of one resource.
type sentResource struct {
	version  string // hash of the marshalled bytes, hex
	resource *anypb.Any
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

// whole returns the generation whose items are exactly what the client
// holds (nil when it holds nothing); ok is false when the set is not one.
func (s *sentSet) whole() (g *generation, ok bool) { return s.base, len(s.changes) == 0 }

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
