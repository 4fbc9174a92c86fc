package xds

import (
	"slices"
	"testing"
)

// TestRequestNamesReuseTheSubscription: a request that repeats, in the same
// order, the names that set the subscription gets the subscription itself,
// unsorted work skipped; any other request, or one after the subscription
// changed some other way, gets its own names sorted and de-duplicated.
func TestRequestNamesReuseTheSubscription(t *testing.T) {
	type step struct {
		name      string
		sent      []string
		replace   []string // set the subscription to these some other way first
		want      []string
		wantReuse bool
		// wantSorted: the request is known to list the subscription as
		// it is, and its hash serves the shared list.
		wantSorted bool
	}
	shared := []string{"y", "x"} // one decoded list that identical requests share
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"the very list again", []step{
			{name: "subscribe", sent: shared, want: []string{"x", "y"}},
			{name: "ack", sent: shared, want: []string{"x", "y"}, wantReuse: true},
		}},
		{"an ACK that repeats the names", []step{
			{name: "subscribe", sent: []string{"c", "a", "b", "a"}, want: []string{"a", "b", "c"}},
			{name: "ack", sent: []string{"c", "a", "b", "a"}, want: []string{"a", "b", "c"}, wantReuse: true},
			{name: "ack again", sent: []string{"c", "a", "b", "a"}, want: []string{"a", "b", "c"}, wantReuse: true},
		}},
		{"the same names in another order", []step{
			{name: "subscribe", sent: []string{"c", "a", "b"}, want: []string{"a", "b", "c"}},
			{name: "reordered", sent: []string{"a", "b", "c"}, want: []string{"a", "b", "c"}, wantSorted: true},
			{name: "repeat of the reordered", sent: []string{"a", "b", "c"}, want: []string{"a", "b", "c"}, wantReuse: true},
		}},
		{"a name added or dropped", []step{
			{name: "subscribe", sent: []string{"b", "a"}, want: []string{"a", "b"}},
			{name: "added", sent: []string{"b", "a", "c"}, want: []string{"a", "b", "c"}},
			{name: "dropped", sent: []string{"b"}, want: []string{"b"}, wantSorted: true},
		}},
		{"the subscription replaced in between", []step{
			{name: "subscribe", sent: []string{"b", "a"}, want: []string{"a", "b"}},
			{name: "after a replacement", sent: []string{"b", "a"}, replace: []string{"z"}, want: []string{"a", "b"}},
		}},
		{"no names", []step{
			{name: "empty", sent: nil, want: nil},
			{name: "empty again", sent: nil, want: nil},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w *watch
			for _, s := range tc.steps {
				if s.replace != nil {
					w.setSubscription(s.replace, false)
				}
				got, r := w.namesOf(s.sent)
				if !slices.Equal(got, s.want) {
					t.Fatalf("%s: names %v, want %v", s.name, got, s.want)
				}
				reused := w != nil && len(got) > 0 && &got[0] == &w.resource.ResourceNames[0]
				if reused != s.wantReuse {
					t.Fatalf("%s: subscription reused %v, want %v", s.name, reused, s.wantReuse)
				}
				if r.sorted != s.wantSorted || (r.sorted && r.hash != hashNames(got)) {
					t.Fatalf("%s: sorted %v with hash %x, want sorted %v and, if so, the names' hash %x", s.name, r.sorted, r.hash, s.wantSorted, hashNames(got))
				}
				if w == nil {
					w = &watch{}
				}
				w.setSubscription(got, false)
				w.subscribedBy(r)
			}
		})
	}
}

// Names that a wildcard subscription followed are not taken for a list:
// the wildcard has none to give.
func TestRequestNamesNeverReuseAWildcard(t *testing.T) {
	w := &watch{}
	w.setSubscription([]string{"a"}, false)
	_, r := w.namesOf([]string{"a"})
	w.subscribedBy(r)
	w.setSubscription(nil, true)
	w.subscribedBy(r)
	if got, _ := w.namesOf([]string{"a"}); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("names %v under a wildcard, want [a]", got)
	}
}

// TestSameNames: the subscription handed back to a repeating request is
// equal to itself without a comparison; any other pair is compared name by
// name.
func TestSameNames(t *testing.T) {
	sub := []string{"a", "b", "c"}
	for _, tc := range []struct {
		name string
		a, b []string
		want bool
	}{
		{"the same slice", sub, sub, true},
		{"an equal copy", sub, slices.Clone(sub), true},
		{"both empty", nil, []string{}, true},
		{"a prefix of the same array", sub[:2], sub, false},
		{"another order", sub, []string{"b", "a", "c"}, false},
		{"one name differs", sub, []string{"a", "b", "d"}, false},
	} {
		if got := sameNames(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: sameNames(%q, %q) = %v, want %v", tc.name, tc.a, tc.b, got, tc.want)
		}
	}
}

// TestSortedNames: names come back sorted and de-duplicated, and the
// client's list, which identical requests share, is never reordered.
func TestSortedNames(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in, want  []string
		wantAlias bool // a list already in order is taken as it is
	}{
		{name: "empty", in: nil, want: nil},
		{name: "in order", in: []string{"a", "b", "c"}, want: []string{"a", "b", "c"}, wantAlias: true},
		{name: "out of order", in: []string{"c", "a", "b"}, want: []string{"a", "b", "c"}},
		{name: "sorted with a duplicate", in: []string{"a", "b", "b", "c"}, want: []string{"a", "b", "c"}},
		{name: "unsorted with duplicates", in: []string{"b", "a", "b", "a"}, want: []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			got := sortedNames(in)
			if !slices.Equal(got, tc.want) {
				t.Errorf("sortedNames(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if !slices.Equal(in, tc.in) {
				t.Errorf("sortedNames reordered its input: %q, was %q", in, tc.in)
			}
			if alias := len(got) > 0 && &got[0] == &in[0]; alias != tc.wantAlias {
				t.Errorf("result shares the input: %v, want %v", alias, tc.wantAlias)
			}
		})
	}
}
