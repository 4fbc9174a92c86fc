package pilotbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Env names a pilot binary built beforehand. `make test` sets it, so that
// pilot is linked once for the whole suite rather than once per test that
// runs it (each link of the 115 MB binary costs seconds of CPU).
const Env = "MESHPILOT_TEST_PILOT"

const pkg = "github.com/meshpilot/meshpilot/cmd/pilot"

var (
	once  sync.Once
	dir   string
	path  string
	built error
)

// Path returns the pilot binary for t: the one Env names, or one built once
// for this process with `go build`. It fails t when neither is there.
func Path(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(Env); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: %v", Env, p, err)
		}
		return p
	}
	once.Do(func() { path, built = build() })
	if built != nil {
		t.Fatal(built)
	}
	return path
}

func build() (string, error) {
	d, err := os.MkdirTemp("", "pilotbin")
	if err != nil {
		return "", err
	}
	dir = d
	bin := filepath.Join(d, "pilot")
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
}

// Main runs the package's tests and then removes the binary Path built, if
// it built one: call it from TestMain, as os.Exit(pilotbin.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	return code
}
