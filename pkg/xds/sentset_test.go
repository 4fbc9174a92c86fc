package xds

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// TestSentSetMatchesAMap drives a sentSet and a plain map, the model it
// replaces, through the same operations, and requires them to agree after
// each: what is held, under which version, and how many.
func TestSentSetMatchesAMap(t *testing.T) {
	gen := func(names ...string) *generation {
		items := make([]generated, len(names))
		for i, n := range names {
			items[i] = generated{name: n, version: "base-" + n}
		}
		return newGeneration(items)
	}
	type op struct {
		reset  *generation
		set    string
		remove string
		clear  bool
	}
	base := gen("a", "b", "c")
	steps := []struct {
		name string
		ops  []op
	}{
		{"reset", []op{{reset: base}}},
		{"change a base name", []op{{reset: base}, {set: "b"}}},
		{"add a name", []op{{reset: base}, {set: "d"}}},
		{"remove a base name", []op{{reset: base}, {remove: "a"}}},
		{"remove a name twice", []op{{reset: base}, {remove: "a"}, {remove: "a"}}},
		{"remove an unknown name", []op{{reset: base}, {remove: "z"}}},
		{"remove then set again", []op{{reset: base}, {remove: "c"}, {set: "c"}}},
		{"add then remove", []op{{reset: base}, {set: "d"}, {remove: "d"}}},
		{"reset drops changes", []op{{reset: base}, {set: "d"}, {remove: "a"}, {reset: gen("x")}}},
		{"no base", []op{{set: "a"}, {set: "b"}, {remove: "a"}}},
		{"clear", []op{{reset: base}, {set: "d"}, {clear: true}}},
	}
	for _, tc := range steps {
		t.Run(tc.name, func(t *testing.T) {
			var s sentSet
			want := map[string]string{}
			for i, o := range tc.ops {
				switch {
				case o.reset != nil:
					s.reset(o.reset)
					want = map[string]string{}
					for _, it := range o.reset.items {
						want[it.name] = it.version
					}
				case o.set != "":
					v := "set-" + o.set + "-" + string(rune('0'+i))
					s.set(o.set, sentResource{version: v})
					want[o.set] = v
				case o.remove != "":
					s.remove(o.remove)
					delete(want, o.remove)
				case o.clear:
					s.clear()
					want = map[string]string{}
				}
			}
			got := map[string]string{}
			for name, r := range s.all() {
				if _, dup := got[name]; dup {
					t.Errorf("all yields %q twice", name)
				}
				got[name] = r.version
			}
			if !maps.Equal(got, want) {
				t.Errorf("all = %v, want %v", got, want)
			}
			if s.len() != len(want) {
				t.Errorf("len = %d, want %d", s.len(), len(want))
			}
			for _, name := range []string{"a", "b", "c", "d", "x", "z"} {
				r, held := s.get(name)
				wantV, wantHeld := want[name]
				if held != wantHeld || r.version != wantV {
					t.Errorf("get(%q) = %q, %v; want %q, %v", name, r.version, held, wantV, wantHeld)
				}
			}
		})
	}
}

// A stream sent exactly a shared generation is recognised without
// comparing resources; any change of its own ends that.
func TestSentSetIs(t *testing.T) {
	g := newGeneration([]generated{{name: "a", version: "1"}})
	var s sentSet
	s.reset(g)
	if !s.is(g) {
		t.Fatal("a reset set is not its generation")
	}
	if s.is(newGeneration(g.items)) {
		t.Error("a set is another generation with the same items")
	}
	s.set("a", sentResource{version: "2"})
	if s.is(g) {
		t.Error("a changed set is still its generation")
	}
}

func TestSortedDifference(t *testing.T) {
	for _, tc := range []struct{ a, b, want []string }{
		{nil, nil, nil},
		{[]string{"a", "b", "c"}, []string{"a", "b", "c"}, nil},
		{[]string{"a", "b", "c"}, []string{"b"}, []string{"a", "c"}},
		{[]string{"a", "c"}, []string{"a", "b", "c", "d"}, nil},
		{[]string{"a", "b"}, nil, []string{"a", "b"}},
		{[]string{"b", "d"}, []string{"a", "c", "e"}, []string{"b", "d"}},
	} {
		if got := sortedDifference(tc.a, tc.b); !slices.Equal(got, tc.want) {
			t.Errorf("sortedDifference(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// internNames interns names with their hash.
func internNames(l *nameLists, names ...string) *nameList { return l.intern(names, hashNames(names)) }

// Streams that subscribe to the same names share one list, which lives
// while one of them holds it; different names are not shared.
func TestNameListsShareEqualSubscriptions(t *testing.T) {
	var lists nameLists
	a := internNames(&lists, "x", "y")
	b := internNames(&lists, "x", "y")
	if a != b {
		t.Fatal("equal subscriptions got lists of their own")
	}
	if c := internNames(&lists, "x", "z"); c == a {
		t.Fatal("different subscriptions shared a list")
	}
	if a.hash != hashNames([]string{"x", "y"}) {
		t.Error("a shared list's hash is not its names'")
	}
	a, b = nil, nil
	// Cleanups run on their own goroutine, which a loaded machine may
	// schedule late.
	for deadline := time.Now().Add(waitLimit); time.Now().Before(deadline); {
		runtime.GC()
		lists.mu.Lock()
		n := len(lists.m)
		lists.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Error("lists no stream holds are still indexed")
}

// TestSharedDiffIsThePerStreamDiff: what a stream that holds a generation
// whole takes from the shared diff is what comparing each item with what
// it holds gives, for random generations, subscriptions and warming names;
// and so does what a stream whose set has changes of its own on top of a
// shared generation takes.
func TestSharedDiffIsThePerStreamDiff(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	randomGen := func() *generation {
		var items []generated
		for i := range 40 {
			if rnd.IntN(4) == 0 {
				continue
			}
			items = append(items, generated{name: fmt.Sprintf("r%02d", i), version: fmt.Sprint(rnd.IntN(3))})
		}
		return newGeneration(items)
	}
	perItem := func(s *sentSet, items []generated, names []string) []generated {
		var out []generated
		for _, it := range items {
			_, named := slices.BinarySearch(names, it.name)
			if prev, ok := s.get(it.name); named || !ok || prev.version != it.version {
				out = append(out, it)
			}
		}
		return out
	}
	names := func(it []generated) []string {
		out := make([]string, len(it))
		for i, x := range it {
			out[i] = x.name
		}
		return out
	}
	for i := range 500 {
		base, gen := randomGen(), randomGen()
		var warming []string
		for j := range 40 {
			if rnd.IntN(10) == 0 {
				warming = append(warming, fmt.Sprintf("r%02d", j))
			}
		}
		w := &watch{}
		switch i % 3 {
		case 0:
			w.sent.reset(base)
		case 1:
			// Partial pushes since base: resources sent again, in base's
			// version or another, and resources the client dropped.
			w.sent.reset(base)
			for j := range 40 {
				name := fmt.Sprintf("r%02d", j)
				switch rnd.IntN(8) {
				case 0:
					w.sent.set(name, sentResource{version: fmt.Sprint(rnd.IntN(3))})
				case 1:
					w.sent.set(name, sentResource{version: "own"})
				case 2:
					w.sent.remove(name)
				}
			}
		}
		want := perItem(&w.sent, gen.items, warming)
		for pass := range 2 { // the second pass reads the memoized diff
			got := changedOrNamed(w, gen, gen.items, warming)
			if !slices.Equal(names(got), names(want)) {
				t.Fatalf("case %d pass %d: changedOrNamed = %v, want %v", i, pass, names(got), names(want))
			}
		}
		if w.sent.len() == len(gen.items) {
			if got, want := unchanged(w, gen, gen.items, false), len(perItem(&w.sent, gen.items, nil)) == 0; got != want {
				t.Fatalf("case %d: unchanged = %v, want %v", i, got, want)
			}
		}
	}
}

// TestChangedSinceFromConcurrentStreams: the streams of one push ask for
// the same diff at once; each gets the one answer, and it is right.
func TestChangedSinceFromConcurrentStreams(t *testing.T) {
	var baseItems, genItems []generated
	for i := range 5000 {
		name := fmt.Sprintf("c%04d", i)
		baseItems = append(baseItems, generated{name: name, version: "1"})
		version := "1"
		if i%1000 == 7 {
			version = "2"
		}
		genItems = append(genItems, generated{name: name, version: version})
	}
	base, gen := newGeneration(baseItems), newGeneration(genItems)
	const streams = 50
	got := make([][]int32, streams)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range streams {
		wg.Go(func() {
			<-start
			got[i] = gen.changedSince(base)
		})
	}
	close(start)
	wg.Wait()
	want := []int32{7, 1007, 2007, 3007, 4007}
	for i, g := range got {
		if !slices.Equal(g, want) {
			t.Fatalf("stream %d: changedSince = %v, want %v", i, g, want)
		}
		if unsafe.SliceData(g) != unsafe.SliceData(got[0]) {
			t.Errorf("stream %d holds an answer of its own", i)
		}
	}
}
