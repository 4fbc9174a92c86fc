package configmapdir

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Dir holds each version of the files in a timestamped directory, a ..data
// symlink to the current one, and each key as a symlink through ..data, as
// the kubelet does. Update swaps ..data atomically.
type Dir struct {
	t       testing.TB
	path    string
	version int
}

// New mounts files in a fresh temporary directory.
func New(t testing.TB, files map[string][]byte) *Dir {
	t.Helper()
	d := &Dir{t: t, path: t.TempDir()}
	d.Update(files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(d.path, name)); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// Path is the mount point.
func (d *Dir) Path() string { return d.path }

// Update replaces the files' contents the way a ConfigMap update does.
func (d *Dir) Update(files map[string][]byte) {
	d.t.Helper()
	d.version++
	version := fmt.Sprintf("..v%d", d.version)
	if err := os.Mkdir(filepath.Join(d.path, version), 0o755); err != nil {
		d.t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(d.path, version, name), data, 0o644); err != nil {
			d.t.Fatal(err)
		}
	}
	tmp := filepath.Join(d.path, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.path, "..data")); err != nil {
		d.t.Fatal(err)
	}
}
