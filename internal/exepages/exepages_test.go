//go:build linux

package exepages

import (
	"crypto/sha256"
	"testing"

	// Linked for its start-up, as pilot links it: registering Envoy's
	// cluster protos reads megabytes of descriptors that nothing reads
	// again, which is what Release is for.
	_ "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
)

// TestRelease releases this test binary's own pages: what was resident goes,
// and code and read-only data read afterwards are what they were.
func TestRelease(t *testing.T) {
	table := sha256.Sum256([]byte(smapsSample)) // runs code, reads constants
	r, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d segments, %d KiB resident before, %d KiB after", r.Segments, r.ResidentBefore>>10, r.ResidentAfter>>10)
	if r.Segments < 1 {
		t.Fatalf("no segments of the executable found: %+v", r)
	}
	if r.ResidentBefore == 0 || r.ResidentAfter > r.ResidentBefore/2 {
		t.Errorf("resident %d bytes before the release and %d after; want at most half left", r.ResidentBefore, r.ResidentAfter)
	}
	if again := sha256.Sum256([]byte(smapsSample)); again != table {
		t.Errorf("the same hash differs after the release: %x, then %x", table, again)
	}
}
