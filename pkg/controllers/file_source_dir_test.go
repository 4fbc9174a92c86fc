package controllers

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// dirRule is drYAML's DestinationRule with its host set, to tell versions
// of the directory apart.
func dirRule(host string) string { return strings.Replace(drYAML, "host: reviews", "host: "+host, 1) }

func hostIs(h *fileHarness, host string) func() bool {
	return func() bool { return slices.Equal(drHosts(h.store), []string{"ns/reviews=" + host}) }
}

// eventsOnly leaves the source its watches alone to notice changes: the
// periodic recheck would otherwise hide a change the watches miss.
func eventsOnly(o *FileSourceOptions) { o.Recheck = time.Hour }

func rename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestFileSourceFollowsReplacedDir: a directory replaced at the source's
// path, the way editors, `kubectl cp` and ConfigMap volumes replace one, is
// loaded and then watched in place of the old one.
func TestFileSourceFollowsReplacedDir(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup makes, under base, the directory with the first version and
		// returns the source's path; replace puts the second in its place.
		setup   func(t *testing.T, base string) string
		replace func(t *testing.T, base string)
		// recheck is the source's Recheck; eventsOnly if zero.
		recheck time.Duration
	}{{
		name: "removed and recreated",
		setup: func(t *testing.T, base string) string {
			writeFile(t, base, "config/dr.yaml", dirRule("first.example.com"))
			return filepath.Join(base, "config")
		},
		replace: func(t *testing.T, base string) {
			if err := os.RemoveAll(filepath.Join(base, "config")); err != nil {
				t.Fatal(err)
			}
			writeFile(t, base, "config/dr.yaml", dirRule("second.example.com"))
		},
	}, {
		name: "renamed away and replaced",
		setup: func(t *testing.T, base string) string {
			writeFile(t, base, "config/dr.yaml", dirRule("first.example.com"))
			return filepath.Join(base, "config")
		},
		replace: func(t *testing.T, base string) {
			writeFile(t, base, "new/dr.yaml", dirRule("second.example.com"))
			rename(t, filepath.Join(base, "config"), filepath.Join(base, "old"))
			rename(t, filepath.Join(base, "new"), filepath.Join(base, "config"))
		},
	}, {
		name:  "a symlink swapped and its old target removed, as in a ConfigMap volume",
		setup: linkedVersion,
		replace: func(t *testing.T, base string) {
			swapLink(t, base)
			if err := os.RemoveAll(filepath.Join(base, "v1")); err != nil {
				t.Fatal(err)
			}
		},
	}, {
		name:    "a symlink swapped and its old target kept",
		setup:   linkedVersion,
		replace: swapLink,
	}, {
		// Nothing the source watches sees this: only the recheck does.
		name: "an ancestor replaced",
		setup: func(t *testing.T, base string) string {
			writeFile(t, base, "a/b/config/dr.yaml", dirRule("first.example.com"))
			return filepath.Join(base, "a", "b", "config")
		},
		replace: func(t *testing.T, base string) {
			writeFile(t, base, "new/b/config/dr.yaml", dirRule("second.example.com"))
			rename(t, filepath.Join(base, "a"), filepath.Join(base, "old"))
			rename(t, filepath.Join(base, "new"), filepath.Join(base, "a"))
		},
		recheck: 20 * time.Millisecond,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			path := tc.setup(t, base)
			h := startFileSource(t, path, func(o *FileSourceOptions) {
				if eventsOnly(o); tc.recheck != 0 {
					o.Recheck = tc.recheck
				}
			})
			if !hostIs(h, "first.example.com")() {
				t.Fatalf("initial load: %v", drHosts(h.store))
			}
			tc.replace(t, base)
			eventually(t, "the new directory loaded", hostIs(h, "second.example.com"))
			// The new directory is watched, not just read once.
			writeFile(t, path, "dr.yaml", dirRule("third.example.com"))
			eventually(t, "a change in the new directory", hostIs(h, "third.example.com"))
			if p := h.store.SourceProblems(); len(p) != 0 {
				t.Errorf("problems %+v", p)
			}
		})
	}
}

// linkedVersion makes base/v1 with the first version and points the
// symlink base/config at it, relatively, as the kubelet points ..data.
func linkedVersion(t *testing.T, base string) string {
	writeFile(t, base, "v1/dr.yaml", dirRule("first.example.com"))
	symlink(t, "v1", filepath.Join(base, "config"))
	return filepath.Join(base, "config")
}

// swapLink makes base/v2 with the second version and renames a new symlink
// over base/config, the atomic swap the kubelet makes.
func swapLink(t *testing.T, base string) {
	writeFile(t, base, "v2/dr.yaml", dirRule("second.example.com"))
	symlink(t, "v2", filepath.Join(base, "config.tmp"))
	rename(t, filepath.Join(base, "config.tmp"), filepath.Join(base, "config"))
}
