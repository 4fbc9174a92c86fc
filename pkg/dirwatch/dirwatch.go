package dirwatch

import (
	"context"
	"fmt"
	"time"

	"github.com/fsnotify/fsnotify"
)

// settle gathers the burst of events of one ConfigMap update (the kubelet
// writes a new timestamped directory, then swaps the ..data symlink) into
// one reload. A variable for tests, which run on machines loaded enough to
// stall a burst for longer.
var settle = 100 * time.Millisecond

// Watch calls reload once the watch is in place (so a change made before
// it is not missed), then after every burst of changes in dir, until ctx is
// done. Errors the watcher reports along the way go to onError; Watch
// itself fails only if dir cannot be watched.
func Watch(ctx context.Context, dir string, reload func(), onError func(error)) error {
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	defer watcher.Close()
	// The directory, not the files: a mounted ConfigMap's files are
	// symlinks whose targets are replaced, which a watch on the files
	// themselves would lose after the first update.
	if err := watcher.Add(dir); err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	reload()

	timer := time.NewTimer(settle)
	timer.Stop()
	defer timer.Stop()
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
		case <-timer.C:
			reload()
		}
	}
}
