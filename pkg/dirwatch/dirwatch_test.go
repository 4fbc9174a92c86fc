package dirwatch

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/configmapdir"
)

// A ConfigMap mount is updated by swapping a symlink; every update must be
// seen, not just the first, and a burst must come as one reload.
func TestWatchFollowsConfigMapUpdates(t *testing.T) {
	// Long enough that a stalled update is still one burst: the test
	// asserts every reload, and an extra one would read the old version.
	defer func(d time.Duration) { settle = d }(settle)
	settle = time.Second
	cm := configmapdir.New(t, map[string][]byte{"mesh": []byte("v1")})
	var (
		mu   sync.Mutex
		seen []string
	)
	reload := func() {
		data, err := os.ReadFile(filepath.Join(cm.Path(), "mesh"))
		if err != nil {
			t.Errorf("read: %v", err)
			return
		}
		mu.Lock()
		seen = append(seen, string(data))
		mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Watch(ctx, cm.Path(), reload, func(err error) { t.Errorf("watch error: %v", err) }) }()

	waitFor := func(want ...string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			got := append([]string(nil), seen...)
			mu.Unlock()
			if slices.Equal(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("reloads saw %q, want %q", got, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("v1") // the reload once the watch is in place
	cm.Update(map[string][]byte{"mesh": []byte("v2")})
	waitFor("v1", "v2")
	cm.Update(map[string][]byte{"mesh": []byte("v3")})
	waitFor("v1", "v2", "v3")

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Watch: %v", err)
	}
}

// A directory replaced by another (renamed into its place, or removed and
// made again) is no longer the one inotify watches: its changes must still
// be seen, and the replacement itself must reload.
func TestWatchFollowsAReplacedDirectory(t *testing.T) {
	defer func(s, r time.Duration) { settle, recheck = s, r }(settle, recheck)
	settle, recheck = 50*time.Millisecond, 50*time.Millisecond
	parent := t.TempDir()
	dir := filepath.Join(parent, "config")
	write := func(dir, version string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "mesh"), []byte(version), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(dir, "v1")
	var (
		mu   sync.Mutex
		last string
	)
	reload := func() {
		data, err := os.ReadFile(filepath.Join(dir, "mesh"))
		if err != nil {
			return // between a removal and its replacement
		}
		mu.Lock()
		last = string(data)
		mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Watch(ctx, dir, reload, func(err error) { t.Errorf("watch error: %v", err) }) }()
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			got := last
			mu.Unlock()
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("last reload saw %q, want %q", got, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("v1")

	staged := filepath.Join(parent, "staged")
	write(staged, "v2")
	if err := os.Rename(dir, filepath.Join(parent, "old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(staged, dir); err != nil {
		t.Fatal(err)
	}
	waitFor("v2")
	write(dir, "v3") // a change inside the replacement
	waitFor("v3")

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	write(dir, "v4")
	waitFor("v4")
	write(dir, "v5")
	waitFor("v5")

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Watch: %v", err)
	}
}

func TestWatchFailsOnAMissingDirectory(t *testing.T) {
	err := Watch(context.Background(), filepath.Join(t.TempDir(), "absent"), func() {}, func(error) {})
	if err == nil {
		t.Fatal("watching a missing directory succeeded")
	}
}
