package controllers

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
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

// chmod changes dir's mode until the test ends, when it is restored so that
// the test's directory can be removed.
func chmod(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
}

// TestFileSourceKeepsConfigOfUnreadableDir: a directory that cannot be read
// is not an empty one. The objects last loaded from it stay, the failure is
// reported (log, problems, gauge), and the directory is loaded again once
// it can be read. Emptied but readable, it does withdraw them.
func TestFileSourceKeepsConfigOfUnreadableDir(t *testing.T) {
	for _, tc := range []struct {
		name string
		// link points the source at a symlink to the directory.
		link bool
		// sub is the directory that cannot be read, under the root; files
		// and objects are what it held, and is kept.
		sub            string
		files, objects int
		// nonRoot: the failure is one root is immune to.
		nonRoot        bool
		unread, reread func(t *testing.T, dir string)
	}{{
		name:   "missing",
		files:  2,
		unread: func(t *testing.T, dir string) { rename(t, dir, dir+".away") },
		reread: func(t *testing.T, dir string) { rename(t, dir+".away", dir) },
	}, {
		name:  "a file, not a directory",
		files: 2,
		unread: func(t *testing.T, dir string) {
			rename(t, dir, dir+".away")
			if err := os.WriteFile(dir, []byte("not a directory"), 0o644); err != nil {
				t.Fatal(err)
			}
		},
		reread: func(t *testing.T, dir string) {
			if err := os.Remove(dir); err != nil {
				t.Fatal(err)
			}
			rename(t, dir+".away", dir)
		},
	}, {
		name:   "a symlink to a missing directory",
		link:   true,
		files:  2,
		unread: func(t *testing.T, dir string) { rename(t, dir, dir+".away") },
		reread: func(t *testing.T, dir string) { rename(t, dir+".away", dir) },
	}, {
		name:    "permission denied",
		files:   2,
		nonRoot: true,
		unread:  func(t *testing.T, dir string) { chmod(t, dir, 0) },
		reread:  func(t *testing.T, dir string) { chmod(t, dir, 0o755) },
	}, {
		name:    "a subdirectory, permission denied",
		sub:     "sub",
		files:   1,
		nonRoot: true,
		unread:  func(t *testing.T, dir string) { chmod(t, filepath.Join(dir, "sub"), 0) },
		reread:  func(t *testing.T, dir string) { chmod(t, filepath.Join(dir, "sub"), 0o755) },
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.nonRoot && os.Geteuid() == 0 {
				// Root reads any directory: the case runs as nobody.
				runAsNobody(t)
				return
			}
			base := t.TempDir()
			dir := filepath.Join(base, "config")
			writeFile(t, dir, "dr.yaml", dirRule("first.example.com"))
			writeFile(t, dir, "sub/echo.yaml", echoFile)
			path := dir
			if tc.link {
				path = filepath.Join(base, "link")
				symlink(t, dir, path)
			}
			h := startFileSource(t, path, eventsOnly)
			const good = "service reviews.ns.svc.cluster.local:[10.0.0.10], endpoint 10.244.1.5:8080 v1, " +
				"pod reviews-v1, rule ns/reviews=first.example.com"
			if got := storeState(h.store); got != good {
				t.Fatalf("initial load: %s", got)
			}

			tc.unread(t, dir)
			eventually(t, "the failure reported, or the objects withdrawn", func() bool {
				return len(h.store.SourceProblems()) > 0 || storeState(h.store) != good
			})
			if got := storeState(h.store); got != good {
				t.Errorf("while the directory cannot be read: %s", got)
			}
			broken := filepath.Join(path, tc.sub)
			objects := 4
			if tc.sub != "" {
				objects = 3
			}
			want := fmt.Sprintf("the %d objects last loaded from its %d files are served", objects, tc.files)
			if p := h.store.SourceProblems(); len(p) != 1 || p[0].File != broken || !strings.Contains(p[0].Message, want) {
				t.Errorf("problems %+v, want one for %s saying %q", p, broken, want)
			}
			if got := gaugeValue(t, h.metrics.FilesRejected); got != float64(tc.files) {
				t.Errorf("files rejected = %v, want %d", got, tc.files)
			}
			if !strings.Contains(h.logs.String(), "cannot read config directory") {
				t.Errorf("logs lack the failure:\n%s", h.logs)
			}

			tc.reread(t, dir)
			writeFile(t, broken, "beta.yaml", betaDRYAML)
			eventually(t, "the directory read again, with its change", func() bool {
				return slices.Contains(drHosts(h.store), "default/ratings=ratings") && len(h.store.SourceProblems()) == 0
			})
			if got := gaugeValue(t, h.metrics.FilesRejected); got != 0 {
				t.Errorf("files rejected = %v, want 0", got)
			}
			if tc.sub == "" && !strings.Contains(h.logs.String(), "config directory can be read again") {
				t.Errorf("logs lack the recovery:\n%s", h.logs)
			}

			// Every file deleted: the directory can be read and says there
			// is no config, which is what the user meant.
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
					t.Fatal(err)
				}
			}
			eventually(t, "every object withdrawn", func() bool {
				return storeState(h.store) == "" && len(h.store.SourceProblems()) == 0
			})
		})
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

// runAsNobody runs the test t in a child process of the test binary as
// user nobody, and fails t if it does not pass there. The binary is copied
// where nobody may run it: go test builds it in a directory only its user
// can enter.
func runAsNobody(t *testing.T) {
	t.Helper()
	// Not t.TempDir: its parent is open to its user alone.
	dir, err := os.MkdirTemp("", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "test")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	var pattern []string
	for _, part := range strings.Split(t.Name(), "/") {
		pattern = append(pattern, "^"+regexp.QuoteMeta(part)+"$")
	}
	cmd := exec.Command(bin, "-test.run="+strings.Join(pattern, "/"), "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TMPDIR="+os.TempDir(), "HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
}
