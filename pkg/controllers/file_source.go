package controllers

import (
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// FileSourceName is the file source's Name and its metrics label.
const FileSourceName = "file"

// DefaultFileDebounce is how long the directory must be quiet before a
// reload, so an editor's or kubectl's burst of writes loads once.
const DefaultFileDebounce = 100 * time.Millisecond

// DefaultFileRecheck is how often the source checks what its watches
// cannot see: that the directory at its path is still the one watched.
const DefaultFileRecheck = 5 * time.Second

// FileSourceOptions configures a FileSource.
type FileSourceOptions struct {
	// Dir is read recursively for *.yaml, *.yml and *.json files, as
	// `kubectl apply -R -f` reads a directory.
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
	// Recheck is how often the source checks that the directory at Dir is
	// still the one it watches, and retries one it could not read;
	// DefaultFileRecheck if 0.
	Recheck time.Duration
}

// FileSource loads Kubernetes and Istio objects from a directory of YAML
// files and keeps the store in step as the files change.
type FileSource struct {
	// dir is the directory's path as given. Files are named under it, not
	// under what its symlinks resolve to, which a ConfigMap volume changes
	// on every update.
	dir      string
	debounce time.Duration
	recheck  time.Duration
	log      *slog.Logger
	metrics  *Metrics
	ingester *Ingester
	decoder  *objectDecoder
	synced   syncedSignal

	// Only the Run goroutine touches the fields below.
	files   map[string]*loadedFile
	applied map[objectKey]appliedObject
	// unreadable are the directories the last reload could not read, with
	// why: the files last loaded from them are kept.
	unreadable map[string]error
}

// loadedFile is what the source holds of one file.
type loadedFile struct {
	hash [sha256.Size]byte
	// docs are the objects of the file's last version that parsed.
	docs []decodedDoc
	// broken is why the file's current version does not parse (a
	// *ParseError) or cannot be read; docs are then still the last good
	// version's, and are served.
	broken error
}

type appliedObject struct {
	doc  decodedDoc
	file string
	// err is why the ingester refused the object, nil if it took it.
	err error
}

// refusal is why the ingester refused the object, as an error that says
// where in its file the object and its fields are now.
func (a appliedObject) refusal() *ObjectError {
	objErr := &ObjectError{Reason: ReasonInvalid, Err: a.err}
	if found := (*ObjectError)(nil); errors.As(a.err, &found) {
		c := *found // the ingester's is kept as it is, for the next report
		objErr = &c
	}
	k := a.doc.key
	objErr.Kind, objErr.Namespace, objErr.Name = k.groupKind.Kind, k.namespace, k.name
	objErr.Document, objErr.Line = a.doc.index, a.doc.line
	objErr.Err = a.doc.text.locate(objErr.Err, a.doc.under)
	return objErr
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
		dir:      filepath.Clean(opts.Dir),
		debounce: cmp.Or(opts.Debounce, DefaultFileDebounce),
		recheck:  cmp.Or(opts.Recheck, DefaultFileRecheck),
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
func (s *FileSource) HasSynced() bool { return s.synced.isMarked() }

// Synced is closed once the first complete load has been applied.
func (s *FileSource) Synced() <-chan struct{} { return s.synced.done() }

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

// reload reads the directory and applies what changed since the last load.
// Only files whose bytes changed are decoded again, so a broken document
// is reported once, not on every unrelated edit. A file that does not parse
// changes nothing: its objects stay as they were in its last version that
// parsed (none if it never did) until it parses again or is deleted. Nor
// does a directory that is missing or cannot be read: that is a failure,
// not the deletion of its files. An empty directory that can be read does
// delete them: it is what deleting every file looks like.
func (s *FileSource) reload() {
	paths, unreadable := s.listFiles()
	files := make(map[string]*loadedFile, len(paths))
	changed := map[string]bool{}
	for _, path := range paths {
		old := s.files[path]
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since it was listed: its objects go
		}
		if err != nil {
			// An unreadable file is kept as one that does not parse, under
			// a hash no content has, so it is read again next time.
			files[path] = s.keep(path, old, [sha256.Size]byte{}, err)
			continue
		}
		hash := sha256.Sum256(data)
		if old != nil && old.hash == hash {
			files[path] = old
			continue
		}
		docs, err := s.decoder.decodeFile(data)
		if err != nil {
			files[path] = s.keep(path, old, hash, err)
			continue
		}
		if old != nil && old.broken != nil {
			s.log.Info("config file parses again", "file", path)
		}
		for _, d := range docs {
			if d.err != nil {
				s.reportDoc(path, d.err)
			}
		}
		files[path] = &loadedFile{hash: hash, docs: docs}
		changed[path] = true
	}
	// Nothing was listed in a directory that cannot be read: what was
	// loaded from it stays as it was.
	was := s.unreadable
	s.unreadable = unreadable
	for path, lf := range s.files {
		if _, listed := files[path]; !listed && s.unread(path) {
			files[path] = lf
			paths = append(paths, path)
		}
	}
	slices.Sort(paths)
	s.files = files
	s.reportUnreadable(was)

	desired := make(map[objectKey]appliedObject)
	var duplicates []model.SourceProblem
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
				objErr := &ObjectError{Kind: d.key.groupKind.Kind, Namespace: d.key.namespace,
					Name: d.key.name, Reason: ReasonDuplicate, Document: d.index, Line: d.line,
					Err: fmt.Errorf("already defined in %s line %d", first.file, first.doc.line)}
				if changed[path] {
					s.reportDoc(path, objErr)
				}
				duplicates = append(duplicates, sourceProblem(path, objErr))
				continue
			}
			desired[d.key] = appliedObject{doc: d, file: path}
		}
	}
	s.apply(desired)
	s.publishProblems(duplicates)
}

// keep records that path's current version, of the given hash, does not
// parse (or cannot be read, with the zero hash) and keeps serving the
// objects of old, its last version that parsed. A failure already
// reported for the same version is not reported again.
func (s *FileSource) keep(path string, old *loadedFile, hash [sha256.Size]byte, err error) *loadedFile {
	lf := &loadedFile{hash: hash, broken: err}
	if old != nil {
		lf.docs = old.docs
		if old.broken != nil && old.broken.Error() == err.Error() {
			return lf
		}
	}
	s.metrics.ConfigErrors.WithLabelValues(FileSourceName, "unknown", ReasonParse).Inc()
	s.log.Warn("config file does not parse; its objects stay as they were in its last version that did",
		"file", path, "error", err, "objectsKept", countObjects(lf.docs))
	return lf
}

func countObjects(docs []decodedDoc) int {
	n := 0
	for _, d := range docs {
		if d.err == nil {
			n++
		}
	}
	return n
}

// publishProblems hands every current problem of the directory to the
// store, for /debug/pushcontext, and counts the files that do not parse or
// cannot be read.
// extra are problems found across files (duplicates).
func (s *FileSource) publishProblems(extra []model.SourceProblem) {
	problems := extra
	rejected := 0
	for dir, err := range s.unreadable {
		files, objects := s.keptIn(dir)
		problems = append(problems, model.SourceProblem{File: dir, Message: fmt.Sprintf(
			"cannot be read: %v; the %d objects last loaded from its %d files are served", err, objects, files)})
	}
	for path, lf := range s.files {
		if lf.broken != nil || s.unread(path) {
			rejected++
		}
		if lf.broken != nil {
			p := model.SourceProblem{File: path, Message: fmt.Sprintf(
				"does not parse: %v; the %d objects of its last version that did are served", lf.broken, countObjects(lf.docs))}
			var parseErr *ParseError
			if errors.As(lf.broken, &parseErr) {
				p.Line = parseErr.Line
			}
			problems = append(problems, p)
			continue
		}
		for _, d := range lf.docs {
			if d.err != nil {
				problems = append(problems, sourceProblem(path, d.err))
			}
		}
	}
	for _, a := range s.applied {
		if a.err != nil {
			problems = append(problems, sourceProblem(a.file, a.refusal()))
		}
	}
	s.metrics.FilesRejected.Set(float64(rejected))
	s.ingester.store.SetSourceProblems(FileSourceName, problems)
}

func sourceProblem(path string, e *ObjectError) model.SourceProblem {
	return model.SourceProblem{File: path, Line: e.Line, Kind: e.Kind, Namespace: e.Namespace, Name: e.Name,
		Message: fmt.Sprintf("rejected (%s): %v", e.Reason, e.Err)}
}

// kindOrder applies objects that others refer to first: Pods before the
// slices that target them, so endpoints get their labels at once.
var kindOrder = map[string]int{"Namespace": 0, "Service": 1, "Pod": 2, "EndpointSlice": 3, "DestinationRule": 4,
	"VirtualService": 5, "PeerAuthentication": 6, "IngressClass": 7, "Secret": 8, "Ingress": 9}

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
		} else if old.err != nil {
			next.err = old.err // still refused: it has not changed
			desired[key] = next
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
			next.err = err
			desired[next.doc.key] = next
			s.reportDoc(next.file, next.refusal())
			continue
		}
		s.metrics.Events.WithLabelValues(FileSourceName, kind, "upsert").Inc()
	}
	s.applied = desired
}

func (s *FileSource) reportDoc(path string, e *ObjectError) {
	report(s.log, s.metrics, FileSourceName, e, "file", path, "document", e.Document, "line", e.Line)
}
