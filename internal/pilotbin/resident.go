package pilotbin

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// ResidentKiB is the resident set of a running process, the Rss line of
// /proc/<pid>/smaps_rollup, for the tests that hold a pilot process to a
// memory figure.
func ResidentKiB(t testing.TB, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		var kib int
		if _, err := fmt.Sscanf(l, "Rss: %d kB", &kib); err == nil {
			return kib
		}
	}
	t.Fatalf("no Rss in smaps_rollup:\n%s", b)
	return 0
}
