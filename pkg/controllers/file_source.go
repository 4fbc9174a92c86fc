package controllers

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// FileSourceName is the file source's Name and its metrics label.
const FileSourceName = "file"

// DefaultFileDebounce is how long the directory must be quiet before a
// reload, so an editor's or kubectl's burst of writes loads once.
const DefaultFileDebounce = 100 * time.Millisecond

// FileSourceOptions configures a FileSource.
type FileSourceOptions struct {
	// Dir is read recursively for *.yaml, *.yml and *.json files.
	Dir   string
	Store model.Store
	// DomainSuffix is the cluster DNS domain; DefaultDomainSuffix if empty.
	DomainSuffix string
	Logger       *slog.Logger
	// Metrics may be shared with other sources; nil creates unregistered ones.
	Metrics *Metrics
	// Ingester, if set, is shared with other sources so that, for example,
	// a file's EndpointSlice resolves a Pod that Kubernetes reported. Store
	// and DomainSuffix are then taken from it. Nil makes a private one.
	Ingester *Ingester
	// Debounce is the quiet period before a reload; DefaultFileDebounce if 0.
	Debounce time.Duration
}

// FileSource loads Kubernetes and Istio objects from a directory of YAML
// files and keeps the store in step as the files change.
type FileSource struct {
	dir      string
	debounce time.Duration
	log      *slog.Logger
	metrics  *Metrics
	ingester *Ingester
	decoder  *objectDecoder
	synced   atomic.Bool

	// Only the Run goroutine touches the fields below.
	files   map[string]*loadedFile
	applied map[objectKey]appliedObject
}

type loadedFile struct {
	hash [sha256.Size]byte
	docs []decodedDoc
}

type appliedObject struct {
	doc  decodedDoc
	file string
}

// NewFileSource returns a source for opts.Dir; Run starts it.
func NewFileSource(opts FileSourceOptions) (*FileSource, error) {
	if opts.Dir == "" {
		return nil, errors.New("file source: Dir is required")
	}
	if opts.Store == nil && opts.Ingester == nil {
		return nil, errors.New("file source: Store or Ingester is required")
	}
	s := &FileSource{
		dir:      opts.Dir,
		debounce: cmp.Or(opts.Debounce, DefaultFileDebounce),
		log:      cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)).With("source", FileSourceName),
		metrics:  opts.Metrics,
		ingester: opts.Ingester,
		decoder:  newObjectDecoder(),
		files:    map[string]*loadedFile{},
		applied:  map[objectKey]appliedObject{},
	}
	if s.metrics == nil {
		s.metrics = NewMetrics(nil)
	}
	if s.ingester == nil {
		s.ingester = NewIngester(IngesterOptions{Store: opts.Store, DomainSuffix: opts.DomainSuffix})
	}
	return s, nil
}

// Name identifies the source in logs and metrics.
func (s *FileSource) Name() string { return FileSourceName }

// HasSynced reports whether the first complete load has been applied.
func (s *FileSource) HasSynced() bool { return s.synced.Load() }

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
	s.synced.Store(true)

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

// hidden names are skipped: dotfiles, and the "..data"-style directories a
// mounted ConfigMap keeps beside its files.
func hidden(name string) bool { return strings.HasPrefix(name, ".") }

func isConfigFile(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
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

// listFiles returns the config files under the directory, sorted.
func (s *FileSource) listFiles() []string {
	var out []string
	err := filepath.WalkDir(s.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == s.dir {
				return err
			}
			s.log.Warn("cannot read config path", "file", path, "error", err)
			return nil
		}
		if path != s.dir && hidden(d.Name()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() && isConfigFile(d.Name()) {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		s.log.Warn("cannot read config directory", "dir", s.dir, "error", err)
	}
	return out
}

// reload reads the directory and applies what changed since the last load.
// Only files whose bytes changed are decoded again, so a broken document
// is reported once, not on every unrelated edit.
func (s *FileSource) reload() {
	paths := s.listFiles()
	files := make(map[string]*loadedFile, len(paths))
	changed := map[string]bool{}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				s.log.Warn("cannot read config file", "file", path, "error", err)
			}
			continue
		}
		hash := sha256.Sum256(data)
		if old := s.files[path]; old != nil && old.hash == hash {
			files[path] = old
			continue
		}
		lf := &loadedFile{hash: hash, docs: s.decoder.decodeAll(data)}
		for _, d := range lf.docs {
			if d.err != nil {
				s.reportDoc(path, d.err)
			}
		}
		files[path] = lf
		changed[path] = true
	}
	s.files = files

	desired := make(map[objectKey]appliedObject)
	for _, path := range paths {
		lf := files[path]
		if lf == nil {
			continue
		}
		for _, d := range lf.docs {
			if d.err != nil {
				continue
			}
			if first, dup := desired[d.key]; dup {
				if changed[path] {
					s.reportDoc(path, &ObjectError{Kind: d.key.groupKind.Kind, Namespace: d.key.namespace,
						Name: d.key.name, Reason: ReasonDuplicate, Document: d.index,
						Err: fmt.Errorf("already defined in %s document %d", first.file, first.doc.index)})
				}
				continue
			}
			desired[d.key] = appliedObject{doc: d, file: path}
		}
	}
	s.apply(desired)
}

// kindOrder applies objects that others refer to first: Pods before the
// slices that target them, so endpoints get their labels at once.
var kindOrder = map[string]int{"Namespace": 0, "Service": 1, "Pod": 2, "EndpointSlice": 3, "DestinationRule": 4,
	"PeerAuthentication": 5, "IngressClass": 6, "Secret": 7, "Ingress": 8}

func (s *FileSource) apply(desired map[objectKey]appliedObject) {
	var removed []appliedObject
	for key, old := range s.applied {
		if _, keep := desired[key]; !keep {
			removed = append(removed, old)
		}
	}
	var upserts []appliedObject
	for key, next := range desired {
		if old, ok := s.applied[key]; !ok || old.doc.hash != next.doc.hash {
			upserts = append(upserts, next)
		}
	}
	byKind := func(a, b appliedObject) int {
		return cmp.Or(cmp.Compare(kindOrder[a.doc.key.groupKind.Kind], kindOrder[b.doc.key.groupKind.Kind]),
			cmp.Compare(a.doc.key.namespace, b.doc.key.namespace), cmp.Compare(a.doc.key.name, b.doc.key.name))
	}
	slices.SortFunc(removed, byKind)
	slices.SortFunc(upserts, byKind)
	for _, old := range removed {
		kind := old.doc.key.groupKind.Kind
		if err := s.ingester.Delete(old.doc.obj); err != nil {
			s.log.Error("deleting object", "file", old.file, "kind", kind, "name", old.doc.key.name, "error", err)
			continue
		}
		s.metrics.Events.WithLabelValues(FileSourceName, kind, "delete").Inc()
	}
	for _, next := range upserts {
		kind := next.doc.key.groupKind.Kind
		if err := s.ingester.Upsert(next.doc.obj); err != nil {
			var objErr *ObjectError
			if !errors.As(err, &objErr) {
				objErr = &ObjectError{Reason: ReasonInvalid, Err: err}
			}
			objErr.Kind, objErr.Document = kind, next.doc.index
			s.reportDoc(next.file, objErr)
			continue
		}
		s.metrics.Events.WithLabelValues(FileSourceName, kind, "upsert").Inc()
	}
	s.applied = desired
}

func (s *FileSource) reportDoc(path string, e *ObjectError) {
	report(s.log, s.metrics, FileSourceName, e, "file", path, "document", e.Document)
}
