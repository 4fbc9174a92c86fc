package xdstest

import (
	"flag"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Update is the repo-wide -update flag: `go test ./... -update` (or
// `make update-golden`) rewrites golden files instead of comparing them.
var Update = flag.Bool("update", false, "rewrite golden files")

// Golden compares got with the file at path, or rewrites the file with -update.
func Golden(t testing.TB, path string, got []byte) {
	t.Helper()
	if *Update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got; run with -update to accept, then review the diff):\n%s", path, diff)
	}
}
