package controllers

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Run loads the directory, then reloads it whenever it changes, until ctx
// is done. It fails only if the directory cannot be watched.
func (s *FileSource) Run(ctx context.Context) error {
	if info, err := os.Stat(s.dir); err != nil {
		return fmt.Errorf("file source: %w", err)
	} else if !info.IsDir() {
		return fmt.Errorf("file source: %s is not a directory", s.dir)
	}
	// Walking does not enter a symlinked root, so resolve it once.
	root, err := filepath.EvalSymlinks(s.dir)
	if err != nil {
		return fmt.Errorf("file source: %w", err)
	}
	s.dir = root
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("file source: %w", err)
	}
	defer watcher.Close()
	// Watch first, so nothing written during the first load is missed.
	s.watchTree(watcher, s.dir)
	s.reload()
	s.synced.mark()

	var timer *time.Timer
	var fire <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-watcher.Events:
			if !ok {
				return errors.New("file source: watcher closed")
			}
			if ev.Has(fsnotify.Create) {
				if info, err := os.Stat(ev.Name); err == nil && info.IsDir() && !hidden(filepath.Base(ev.Name)) {
					s.watchTree(watcher, ev.Name)
				}
			}
			if timer == nil {
				timer = time.NewTimer(s.debounce)
			} else {
				timer.Reset(s.debounce)
			}
			fire = timer.C
		case err, ok := <-watcher.Errors:
			if !ok {
				return errors.New("file source: watcher closed")
			}
			s.log.Warn("watching the config directory", "error", err)
		case <-fire:
			fire = nil
			s.reload()
		}
	}
}

func (s *FileSource) watchTree(w *fsnotify.Watcher, root string) {
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // vanished or unreadable; the next reload reports it
		}
		if !d.IsDir() {
			return nil
		}
		if path != root && hidden(d.Name()) {
			return filepath.SkipDir
		}
		if err := w.Add(path); err != nil {
			s.log.Warn("cannot watch directory", "dir", path, "error", err)
		}
		return nil
	})
}
