package controllers

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Run loads the directory, then reloads it whenever it changes, until ctx
// is done. It fails only if the directory is missing at start or nothing
// can be watched; once running, a directory that goes missing or cannot be
// read keeps the objects last loaded from it, and is loaded again when it
// is back.
func (s *FileSource) Run(ctx context.Context) error {
	root, _, err := s.resolveRoot()
	if err != nil {
		return fmt.Errorf("file source: %w", err)
	}
	// Watch first, so nothing written during the first load is missed.
	w, err := s.watch(root)
	if err != nil {
		return fmt.Errorf("file source: %w", err)
	}
	defer func() { w.Close() }()
	s.reload()
	s.synced.mark()

	var timer *time.Timer
	var fire <-chan time.Time
	schedule := func() {
		if timer == nil {
			timer = time.NewTimer(s.debounce)
		} else {
			timer.Reset(s.debounce)
		}
		fire = timer.C
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	recheck := time.NewTicker(s.recheck)
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("file source: watcher closed")
			}
			if !w.concerns(ev.Name) {
				continue // a sibling of the directory, in a parent watched
			}
			if ev.Has(fsnotify.Create) && w.inTree(ev.Name) {
				if info, err := os.Stat(ev.Name); err == nil && info.IsDir() && !hidden(filepath.Base(ev.Name)) {
					s.watchTree(w.Watcher, ev.Name)
				}
			}
			schedule()
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("file source: watcher closed")
			}
			// Events may have been lost (the queue overflowed, say): read
			// everything again rather than miss a change.
			s.log.Warn("watching the config directory", "error", err)
			schedule()
		case <-fire:
			fire = nil
			w = s.rewatch(w)
			s.reload()
		case <-recheck.C:
			// What no watch sees: an ancestor replaced, or a directory that
			// failed to read for want of file descriptors, say, and now
			// would not.
			if len(s.unreadable) > 0 || s.moved(w) {
				schedule()
			}
		}
	}
}

// dirWatch watches the directory's tree, and the parents of the source's
// path and of the directory it resolves to: the directory removed and
// created again, renamed and replaced, or a symlink to it swapped shows
// only there.
type dirWatch struct {
	*fsnotify.Watcher
	link string // the source's path, absolute, symlinks not resolved
	// root is the directory the path resolved to when last it did.
	root string
	// tree is whether root's tree is watched: not while it is missing.
	tree bool
	// dirs are the directories watched, as they were when watched, so
	// that their replacement is noticed: the parents, and the root.
	dirs []watchedDir
}

type watchedDir struct {
	path string
	info fs.FileInfo
}

// resolveRoot returns the directory at the source's path with its symlinks
// resolved, absolute, as walks and watches need it.
func (s *FileSource) resolveRoot() (string, fs.FileInfo, error) {
	root, err := filepath.EvalSymlinks(s.dir)
	if err == nil {
		root, err = filepath.Abs(root)
	}
	if err != nil {
		return "", nil, err
	}
	info, err := os.Stat(root)
	if err != nil {
		return "", nil, err
	}
	if !info.IsDir() {
		return "", nil, s.notADirectory()
	}
	return root, info, nil
}

func (s *FileSource) notADirectory() error { return fmt.Errorf("%s is not a directory", s.dir) }

// watch watches the directory at the source's path, or only the parents
// while there is none; lastRoot is the directory the path last resolved to.
func (s *FileSource) watch(lastRoot string) (*dirWatch, error) {
	link, err := filepath.Abs(s.dir)
	if err != nil {
		return nil, err
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	w := &dirWatch{Watcher: fw, link: link, root: lastRoot}
	root, info, rootErr := s.resolveRoot()
	if rootErr == nil {
		w.root = root
	}
	for _, parent := range []string{filepath.Dir(link), filepath.Dir(w.root)} {
		if !slices.ContainsFunc(w.dirs, func(d watchedDir) bool { return d.path == parent }) {
			w.add(parent)
		}
	}
	if rootErr == nil {
		w.dirs = append(w.dirs, watchedDir{root, info})
		s.watchTree(fw, root)
		w.tree = true
	}
	return w, nil
}

// add watches a parent. One that cannot be watched is left to the recheck.
func (w *dirWatch) add(dir string) {
	// Identified before it is watched: replaced in between, it then looks
	// replaced, and is watched again.
	info, err := os.Stat(dir)
	if err != nil || w.Add(dir) != nil {
		return
	}
	w.dirs = append(w.dirs, watchedDir{dir, info})
}

// concerns reports whether an event on path can change what the source
// loads: one in the tree, or on the directory, its path or a parent.
func (w *dirWatch) concerns(path string) bool {
	return path == w.link || path == w.root || w.inTree(path) ||
		slices.ContainsFunc(w.dirs, func(d watchedDir) bool { return d.path == path })
}

func (w *dirWatch) inTree(path string) bool {
	return w.tree && strings.HasPrefix(path, w.root+string(filepath.Separator))
}

// moved reports whether the source's path no longer leads to the tree w
// watches, or a directory w watches was replaced.
func (s *FileSource) moved(w *dirWatch) bool {
	if root, _, err := s.resolveRoot(); err == nil && (!w.tree || root != w.root) {
		return true
	}
	// A directory deleted is no longer watched; one made in its place may
	// have its inode number, and look the same.
	watching := w.WatchList()
	for _, d := range w.dirs {
		if !slices.Contains(watching, d.path) {
			return true
		}
		if info, err := os.Stat(d.path); err != nil || !os.SameFile(info, d.info) {
			return true
		}
	}
	return false
}

// rewatch returns w, or a new watch in its place if w has moved.
func (s *FileSource) rewatch(w *dirWatch) *dirWatch {
	if !s.moved(w) {
		return w
	}
	next, err := s.watch(w.root)
	if err != nil {
		s.log.Warn("cannot watch the config directory again; retrying", "dir", s.dir, "error", err)
		return w
	}
	w.Close()
	return next
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
