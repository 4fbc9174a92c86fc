//go:build linux

package exepages

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	// Linked for its start-up, as pilot links it: registering Envoy's
	// cluster protos reads megabytes of descriptors that nothing reads
	// again, which is what Release is for.
	_ "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
)

// TestRelease releases this test binary's own pages: what was resident goes,
// and code and read-only data read afterwards are what they were.
func TestRelease(t *testing.T) {
	// Map every page in first, as a large program's start-up maps much of
	// it, so that what was resident does not depend on what ran before
	// (another Release, with -count). MADV_POPULATE_READ needs Linux 5.14.
	segs, err := readImage()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		if err := madvise(s, unix.MADV_POPULATE_READ); err != nil && !errors.Is(err, unix.EINVAL) {
			t.Fatalf("madvise(MADV_POPULATE_READ) %s: %v", s, err)
		}
	}
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

// TestReleaseWhen: nothing happens until ready closes, nor ever when the
// context ends first; once ready, the release is done and logged.
func TestReleaseWhen(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logged, nil))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ReleaseWhen(ctx, make(chan struct{}), log)
	if logged.Len() != 0 {
		t.Fatalf("logged with the context ended and nothing ready: %s", logged.String())
	}

	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		ReleaseWhen(context.Background(), ready, log)
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("returned before ready closed")
	case <-time.After(50 * time.Millisecond):
	}
	close(ready)
	<-done
	var rec struct {
		Msg                 string
		ResidentBeforeBytes int64
		ResidentAfterBytes  int64
	}
	if err := json.Unmarshal(logged.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, logged.String())
	}
	if rec.Msg != "released the executable's start-up pages" || rec.ResidentBeforeBytes <= rec.ResidentAfterBytes {
		t.Errorf("logged %s", logged.String())
	}
}
