package inject

import (
	"context"
	"fmt"
	"time"

	"github.com/fsnotify/fsnotify"
)

// reloadDelay gathers the burst of events of one ConfigMap update (the
// kubelet writes a new timestamped directory, then swaps the ..data
// symlink) into one reload.
const reloadDelay = 100 * time.Millisecond

// Run watches ConfigDir and reloads the configuration after each change
// until ctx is done. A change that does not load is logged and counted, and
// the previous configuration stays in use.
func (h *Handler) Run(ctx context.Context) error {
	if h.opts.ConfigDir == "" {
		<-ctx.Done() // the built-in configuration never changes
		return nil
	}
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("inject: watch %s: %w", h.opts.ConfigDir, err)
	}
	defer watcher.Close()
	// The directory, not the files: a mounted ConfigMap's files are
	// symlinks whose targets are replaced, which a watch on the files
	// themselves would lose after the first update.
	if err := watcher.Add(h.opts.ConfigDir); err != nil {
		return fmt.Errorf("inject: watch %s: %w", h.opts.ConfigDir, err)
	}
	// A change between NewHandler and the watch would otherwise be missed.
	h.reloadLogged()

	timer := time.NewTimer(reloadDelay)
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
			timer.Reset(reloadDelay)
		case err, ok := <-watcher.Errors:
			if !ok {
				return nil
			}
			h.opts.Logger.Warn("injection config watch error", "dir", h.opts.ConfigDir, "err", err)
		case <-timer.C:
			h.reloadLogged()
		}
	}
}

func (h *Handler) reloadLogged() {
	before := h.config.Load()
	if err := h.Reload(); err != nil {
		h.opts.Logger.Error("injection config not reloaded; keeping the previous one", "dir", h.opts.ConfigDir, "err", err)
		return
	}
	after := h.config.Load()
	if before == nil || before.digest != after.digest {
		h.opts.Logger.Info("injection config loaded", "dir", h.opts.ConfigDir, "digest", fmt.Sprintf("%x", after.digest[:8]))
	}
}
