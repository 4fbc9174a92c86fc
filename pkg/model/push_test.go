package model

import (
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
			if got.Full != tc.wantFull {
				t.Errorf("Full = %v", got.Full)
			}
			if tc.wantKeys == -1 && got.ConfigsUpdated != nil {
				t.Errorf("forced push lost: keys %v", got.ConfigsUpdated)
			}
			if tc.wantKeys >= 0 && len(got.ConfigsUpdated) != tc.wantKeys {
				t.Errorf("keys %v, want %d", got.ConfigsUpdated, tc.wantKeys)
			}
			if !got.Start.Equal(tc.wantT) {
				t.Errorf("Start = %v, want the oldest %v", got.Start, tc.wantT)
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
