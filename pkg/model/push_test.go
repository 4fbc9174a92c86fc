package model

import (
	"strconv"
	"testing"
	"time"
)

func TestPushRequestMerge(t *testing.T) {
	t0 := time.Unix(1000, 0)
	svc := ConfigKey{KindService, "ns", "a"}
	eps := ConfigKey{KindEndpoints, "ns", "a"}
	forced := &PushRequest{Full: true, Start: t0.Add(time.Second)}
	cases := []struct {
		name     string
		a, b     *PushRequest
		wantFull bool
		wantKeys int // -1: forced, no keys
		wantT    time.Time
	}{
		{"endpoints only stay incremental", NewPushRequest(eps, t0), NewPushRequest(eps, t0.Add(time.Second)), false, 1, t0},
		{"a config change makes it full", NewPushRequest(eps, t0.Add(time.Second)), NewPushRequest(svc, t0), true, 2, t0},
		{"forced stays forced", NewPushRequest(svc, t0), forced, true, -1, t0},
		{"nil merges", nil, NewPushRequest(svc, t0), true, 1, t0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.a.Merge(tc.b)
			checkMerged(t, got, tc.wantFull, tc.wantKeys, tc.wantT)
		})
	}
}

// TestPushRequestAdd holds Add to Merge's results, and checks that it
// grows its receiver in place and leaves its argument alone.
func TestPushRequestAdd(t *testing.T) {
	t0 := time.Unix(1000, 0)
	svc := ConfigKey{KindService, "ns", "a"}
	eps := ConfigKey{KindEndpoints, "ns", "a"}
	cases := []struct {
		name     string
		a, b     func() *PushRequest
		wantFull bool
		wantKeys int // -1: forced, no keys
		wantT    time.Time
	}{
		{"endpoints only stay incremental",
			func() *PushRequest { return NewPushRequest(eps, t0) },
			func() *PushRequest { return NewPushRequest(eps, t0.Add(time.Second)) }, false, 1, t0},
		{"a config change makes it full",
			func() *PushRequest { return NewPushRequest(eps, t0.Add(time.Second)) },
			func() *PushRequest { return NewPushRequest(svc, t0) }, true, 2, t0},
		{"a forced push absorbs keys",
			func() *PushRequest { return NewPushRequest(svc, t0) },
			func() *PushRequest { return &PushRequest{Full: true, Start: t0.Add(time.Second)} }, true, -1, t0},
		{"keys do not unforce a forced push",
			func() *PushRequest { return &PushRequest{Full: true, Start: t0} },
			func() *PushRequest { return NewPushRequest(svc, t0.Add(time.Second)) }, true, -1, t0},
		{"nil receiver takes the argument",
			func() *PushRequest { return nil },
			func() *PushRequest { return NewPushRequest(svc, t0) }, true, 1, t0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.a(), tc.b()
			bKeys := len(b.ConfigsUpdated)
			got := a.Add(b)
			checkMerged(t, got, tc.wantFull, tc.wantKeys, tc.wantT)
			if a != nil && got != a {
				t.Error("Add returned a new request; want its receiver, grown in place")
			}
			if len(b.ConfigsUpdated) != bKeys {
				t.Errorf("Add changed its argument's keys: %v", b.ConfigsUpdated)
			}
		})
	}
}

func checkMerged(t *testing.T, got *PushRequest, wantFull bool, wantKeys int, wantStart time.Time) {
	t.Helper()
	if got.Full != wantFull {
		t.Errorf("Full = %v", got.Full)
	}
	if wantKeys == -1 && got.ConfigsUpdated != nil {
		t.Errorf("forced push lost: keys %v", got.ConfigsUpdated)
	}
	if wantKeys >= 0 && len(got.ConfigsUpdated) != wantKeys {
		t.Errorf("keys %v, want %d", got.ConfigsUpdated, wantKeys)
	}
	if !got.Start.Equal(wantStart) {
		t.Errorf("Start = %v, want the oldest %v", got.Start, wantStart)
	}
}

// BenchmarkDebounceInitialSync folds the events of an initial sync at the
// standard scale (5,000 Services, each with its endpoints and 10 Pods)
// into one pending request, as the debouncer does.
func BenchmarkDebounceInitialSync(b *testing.B) {
	var keys []ConfigKey
	for i := range 5000 {
		name := "svc-" + strconv.Itoa(i)
		keys = append(keys, ConfigKey{KindService, "ns", name}, ConfigKey{KindEndpoints, "ns", name})
		for p := range 10 {
			keys = append(keys, ConfigKey{KindWorkload, "ns", name + "-" + strconv.Itoa(p)})
		}
	}
	now := time.Now()
	// Merge is left out: copying the pending request per event takes
	// minutes at this size.
	for _, fold := range []struct {
		name string
		fn   func(pending, req *PushRequest) *PushRequest
	}{{"Add", (*PushRequest).Add}} {
		b.Run(fold.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var pending *PushRequest
				for _, k := range keys {
					pending = fold.fn(pending, NewPushRequest(k, now))
				}
				if len(pending.ConfigsUpdated) != len(keys) {
					b.Fatalf("%d keys, want %d", len(pending.ConfigsUpdated), len(keys))
				}
			}
		})
	}
}

func TestExportTo(t *testing.T) {
	cases := []struct {
		name    string
		e       ExportTo
		ns      string
		allowed bool
	}{
		{"nil is public", nil, "x", true},
		{"star is public", ExportTo{"*"}, "x", true},
		{"empty is nobody", ExportTo{}, "x", false},
		{"listed", ExportTo{"a", "b"}, "b", true},
		{"not listed", ExportTo{"a"}, "b", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.e.Allows(tc.ns); got != tc.allowed {
				t.Errorf("Allows(%q) = %v", tc.ns, got)
			}
		})
	}
}
