package xds

import (
	"runtime"
	"slices"
	"sync"
	"weak"
)

// nameLists lets SotW streams with the same subscription hold one copy of
// its names. Envoy subscribes every EDS cluster by name: 50 identical
// sidecars of a 5,000-service mesh each held their own 5,000 names, a
// quarter of a MiB, and at 20,000 services the names were most of what a
// client cost the control plane. A list lives while some stream holds it.
type nameLists struct {
	mu sync.Mutex
	m  map[uint64]weak.Pointer[nameList]
}

// nameList is a sorted subscription shared by streams; never modified.
type nameList struct {
	names []string
	hash  uint64
}

// intern returns the shared list equal to names (sorted, de-duplicated),
// which it becomes when there is none yet; h is hashNames(names).
func (l *nameLists) intern(names []string, h uint64) *nameList {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.m[h]; ok {
		if nl := p.Value(); nl != nil && slices.Equal(nl.names, names) {
			return nl
		}
	}
	// A new list, or another one with the same hash, which is then not
	// shared: the entry goes to the newer list.
	nl := &nameList{names: names, hash: h}
	if l.m == nil {
		l.m = map[uint64]weak.Pointer[nameList]{}
	}
	l.m[h] = weak.Make(nl)
	runtime.AddCleanup(nl, l.forget, h)
	return nl
}

// forget drops the entry of hash h once the list it points to is gone.
func (l *nameLists) forget(h uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.m[h]; ok && p.Value() == nil {
		delete(l.m, h)
	}
}
