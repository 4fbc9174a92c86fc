package helm

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestManifestsUpToDate re-renders manifests/ with the same script as
// `make manifests` and fails if the committed copy differs.
func TestManifestsUpToDate(t *testing.T) {
	tl := newTools(t)
	out := t.TempDir()
	tl.run(t, "", filepath.Join(tl.root, "hack", "manifests.sh"), out)
	for _, name := range []string{"base.yaml", "pilot.yaml", "cni.yaml"} {
		want, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(tl.root, "manifests", name))
		if err != nil {
			t.Fatalf("%v: run make manifests", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("manifests/%s is stale: run make manifests and commit the result", name)
		}
	}
}

// TestBaseCRDsAreGenerated checks that the chart installs exactly the CRD
// that make generate extracts from istio.io/api, never a hand-edited copy.
func TestBaseCRDsAreGenerated(t *testing.T) {
	root := newTools(t).root
	generated, err := filepath.Glob(filepath.Join(root, "manifests", "crds", "*.yaml"))
	if err != nil || len(generated) == 0 {
		t.Fatalf("no generated CRDs in manifests/crds (%v)", err)
	}
	inChart, err := filepath.Glob(filepath.Join(root, "charts", "base", "crds", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inChart) != len(generated) {
		t.Errorf("charts/base/crds has %d files, manifests/crds %d: run make generate", len(inChart), len(generated))
	}
	for _, src := range generated {
		want, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(root, "charts", "base", "crds", filepath.Base(src)))
		if err != nil {
			t.Errorf("%v: run make generate", err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("charts/base/crds/%s differs from manifests/crds: run make generate", filepath.Base(src))
		}
	}
}
