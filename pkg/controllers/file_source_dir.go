package controllers

import (
	"io/fs"
	"path/filepath"
	"strings"
)

// listFiles returns the config files under the directory, sorted, and the
// directories that cannot be read, with why.
func (s *FileSource) listFiles() ([]string, map[string]error) {
	root, _, err := s.resolveRoot()
	if err != nil {
		return nil, map[string]error{s.dir: err}
	}
	var out []string
	unreadable := map[string]error{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if path == root {
			if err == nil && !d.IsDir() {
				err = s.notADirectory() // replaced since resolved
			}
			return err
		}
		name := filepath.Join(s.dir, strings.TrimPrefix(path, root))
		if err != nil {
			unreadable[name] = err
			return nil
		}
		if hidden(d.Name()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() && isConfigFile(d.Name()) {
			out = append(out, name)
		}
		return nil
	})
	if err != nil {
		return nil, map[string]error{s.dir: err}
	}
	return out, unreadable
}

// under reports whether path is in dir, the source's directory or one
// under it.
func (s *FileSource) under(path, dir string) bool {
	return dir == s.dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}

// unread reports whether path is in a directory that cannot be read.
func (s *FileSource) unread(path string) bool {
	for dir := range s.unreadable {
		if s.under(path, dir) {
			return true
		}
	}
	return false
}

// keptIn counts the files, and their objects, kept from dir.
func (s *FileSource) keptIn(dir string) (files, objects int) {
	for path, lf := range s.files {
		if s.under(path, dir) {
			files++
			objects += countObjects(lf.docs)
		}
	}
	return files, objects
}

// reportUnreadable logs each directory that cannot be read when it starts
// failing or fails differently (was is what failed before), and the root
// when it can be read again.
func (s *FileSource) reportUnreadable(was map[string]error) {
	for dir, err := range s.unreadable {
		if old, ok := was[dir]; !ok || old.Error() != err.Error() {
			files, objects := s.keptIn(dir)
			s.log.Warn("cannot read config directory; the objects last loaded from it stay",
				"dir", dir, "error", err, "filesKept", files, "objectsKept", objects)
		}
	}
	if _, failed := was[s.dir]; failed && s.unreadable[s.dir] == nil {
		s.log.Info("config directory can be read again", "dir", s.dir)
	}
}
