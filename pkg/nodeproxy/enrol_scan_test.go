package nodeproxy

import (
	"net/netip"
	"path/filepath"
	"testing"
	"time"
)

// TestAddressScanReuse follows a burst of enrolments: one scan serves
// them, a sandbox newer than the scan is still found, and an old or
// dropped scan is not reused.
func TestAddressScanReuse(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.6")
	node := map[netip.Addr][]string{a: {"/run/netns/a"}}
	clock := time.Unix(1_700_000_000, 0)
	scans := 0
	s := &addressScan{
		scan: func() nodeNamespaces {
			scans++
			out := nodeNamespaces{byIP: map[netip.Addr][]string{}, byPath: map[string]scannedNetns{}}
			for ip, paths := range node {
				out.byIP[ip] = paths
				for _, path := range paths {
					out.byPath[path] = scannedNetns{path: path, procs: []string{"/proc/" + filepath.Base(path)}}
				}
			}
			return out
		},
		now: func() time.Time { return clock },
	}
	steps := []struct {
		name      string
		before    func()
		ip        netip.Addr
		want      string
		wantScans int
	}{
		{"the first lookup scans", nil, a, "/run/netns/a", 1},
		{"the next one in the burst reuses it", func() { clock = clock.Add(time.Second) }, a, "/run/netns/a", 1},
		{"a sandbox newer than the scan is found by a fresh one", func() { node[b] = []string{"/run/netns/b"} }, b, "/run/netns/b", 2},
		{"a scan older than scanReuse is not reused", func() {
			clock = clock.Add(scanReuse)
			node[a] = []string{"/run/netns/a2"}
		}, a, "/run/netns/a2", 3},
		{"a dropped scan is not reused", func() {
			s.invalidate()
			node[a] = []string{"/run/netns/a3"}
		}, a, "/run/netns/a3", 4},
	}
	for _, step := range steps {
		if step.before != nil {
			step.before()
		}
		got, err := s.namespaceOf([]netip.Addr{step.ip})
		if err != nil || got.path != step.want || scans != step.wantScans {
			t.Fatalf("%s: namespaceOf(%v) = %q, %v after %d scans; want %q after %d", step.name, step.ip, got.path, err, scans, step.want, step.wantScans)
		}
		// The owner check reads the processes the same scan found.
		if want := "/proc/" + filepath.Base(step.want); len(got.procs) != 1 || got.procs[0] != want {
			t.Fatalf("%s: the namespace's processes are %v, want [%s]", step.name, got.procs, want)
		}
	}
	// An address no namespace holds scans once more, then gives up.
	if got, err := s.namespaceOf([]netip.Addr{netip.MustParseAddr("10.0.0.99")}); err == nil || scans != 5 {
		t.Fatalf("unknown address: %q, %v after %d scans; want errNetnsNotFound after 5", got.path, err, scans)
	}
}
