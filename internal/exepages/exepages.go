//go:build linux

package exepages

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"time"

	"golang.org/x/sys/unix"
)

// Package initialisation and start-up (every API group's scheme, the
// protobuf registries, flag parsing, the first LIST and push context) read
// about 40 MiB of the pilot binary's code and read-only data, mapped in by
// the kernel 64 KiB around each page touched. A control plane at rest then
// runs a few MiB of it; the rest stays mapped, in its RSS, for the life of
// the process, and the kernel must unmap each page before it can reclaim
// it.
//
// Release unmaps the executable's read-only segments (MADV_DONTNEED: the
// next access to a page maps it again from the page cache, as the first
// did) after marking their pages the first to reclaim (MADV_COLD, which
// leaves pages that another process maps alone). What falls is the RSS.
// The page cache keeps the pages, as inactive file pages, until memory is
// short; a memory cgroup is charged for them either way, and the kubelet's
// working set, which leaves inactive file pages out, counts them neither
// way while the kernel has not yet found them in use.
//
// A segment with any private (copied-on-write) page is skipped: its
// contents are no longer the file's, and unmapping would lose them. See
// madvise(2) for both advices; MADV_COLD needs Linux 5.4, and without it
// the pages are only unmapped.

// Report says how much of the executable's read-only segments was resident
// before and after a Release.
type Report struct {
	Segments       int
	ResidentBefore int64 // bytes
	ResidentAfter  int64
}

// Release unmaps the running executable's read-only segments; see above.
// It is safe at any time, and worth calling once start-up is over.
func Release() (Report, error) {
	segs, err := readImage()
	if err != nil {
		return Report{}, err
	}
	r := Report{Segments: len(segs)}
	for _, s := range segs {
		r.ResidentBefore += s.rss
		if err := madvise(s, unix.MADV_COLD); err != nil && !errors.Is(err, unix.EINVAL) {
			return r, fmt.Errorf("madvise(MADV_COLD) %s: %w", s, err)
		}
		if err := madvise(s, unix.MADV_DONTNEED); err != nil {
			return r, fmt.Errorf("madvise(MADV_DONTNEED) %s: %w", s, err)
		}
	}
	after, err := readImage()
	if err != nil {
		return r, err
	}
	for _, s := range after {
		r.ResidentAfter += s.rss
	}
	return r, nil
}

// readImage lists the read-only segments of the file that holds this
// function's code: the executable, found by address rather than by path,
// which a container's overlay or a replaced binary may show differently.
func readImage() ([]segment, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return imageSegments(f, reflect.ValueOf(Release).Pointer())
}

func madvise(s segment, advice int) error {
	if _, _, errno := unix.Syscall(unix.SYS_MADVISE, s.start, s.end-s.start, uintptr(advice)); errno != 0 {
		return errno
	}
	return nil
}

// ReleaseWhen calls Release once ready is closed, and logs what it did.
// Start-up is over when the process first serves: a control plane's first
// push context, a node proxy's first workload set.
func ReleaseWhen(ctx context.Context, ready <-chan struct{}, log *slog.Logger) {
	select {
	case <-ready:
	case <-ctx.Done():
		return
	}
	start := time.Now()
	r, err := Release()
	if err != nil {
		log.Warn("could not release the executable's start-up pages", "err", err)
		return
	}
	log.Info("released the executable's start-up pages", "segments", r.Segments,
		"residentBeforeBytes", r.ResidentBefore, "residentAfterBytes", r.ResidentAfter, "took", time.Since(start))
}
