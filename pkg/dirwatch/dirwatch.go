package dirwatch

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
)

// settle gathers the burst of events of one ConfigMap update (the kubelet
// writes a new timestamped directory, then swaps the ..data symlink) into
// one reload. A variable for tests, which run on machines loaded enough to
// stall a burst for longer.
var settle = 100 * time.Millisecond

// recheck is how often Watch looks for what its watch cannot see: the
// directory removed and made again, or another renamed into its place. A
// variable for tests.
var recheck = 5 * time.Second

// Watch calls reload once the watch is in place (so a change made before
// it is not missed), then after every burst of changes in dir, until ctx is
// done. A directory replaced at dir is watched in its place, and reloaded;
// while dir is missing, the last reload stands. Errors the watcher reports
// along the way go to onError; Watch itself fails only if dir cannot be
// watched at start.
func Watch(ctx context.Context, dir string, reload func(), onError func(error)) error {
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	defer watcher.Close()
	// The directory, not the files: a mounted ConfigMap's files are
	// symlinks whose targets are replaced, which a watch on the files
	// themselves would lose after the first update.
	watched, err := add(watcher, dir)
	if err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	reload()

	timer := time.NewTimer(settle)
	timer.Stop()
	defer timer.Stop()
	ticker := time.NewTicker(recheck)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-watcher.Events:
			if !ok {
				return nil
			}
			timer.Reset(settle)
		case err, ok := <-watcher.Errors:
			if !ok {
				return nil
			}
			onError(err)
		case <-ticker.C:
			if replaced(watcher, dir, watched) {
				// Best effort: a watch that follows a directory renamed
				// away would report changes that no longer concern dir.
				_ = watcher.Remove(dir)
				if info, err := add(watcher, dir); err == nil {
					watched = info
					timer.Reset(settle)
				}
			}
		case <-timer.C:
			reload()
		}
	}
}

// add watches dir and returns what it was when watched. It is identified
// first: replaced in between, it then looks replaced, and is watched again.
func add(watcher *fsnotify.Watcher, dir string) (fs.FileInfo, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	return info, watcher.Add(dir)
}

// replaced reports whether dir is no longer the directory watched: removed
// (inotify drops the watch), or another in its place.
func replaced(watcher *fsnotify.Watcher, dir string, watched fs.FileInfo) bool {
	if !slices.Contains(watcher.WatchList(), dir) {
		return true
	}
	info, err := os.Stat(dir)
	return err == nil && !os.SameFile(info, watched)
}
