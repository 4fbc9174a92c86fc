package controllers

import (
	"fmt"
	"log/slog"
)

// ObjectError is why one object (or one document of a file) was rejected.
type ObjectError struct {
	Kind      string
	Namespace string
	Name      string
	// Reason is one of the Reason* constants, the metric label.
	Reason string
	// Document is the 0-based position of the document in its file, or -1
	// when the object did not come from a file.
	Document int
	// Line is where the object starts in its file, counting from 1; 0 when
	// it did not come from a file.
	Line int
	Err  error
}

func (e *ObjectError) Error() string {
	what := e.Kind
	if what == "" {
		what = "object"
	}
	if e.Name != "" {
		what += " " + e.Namespace + "/" + e.Name
	}
	switch {
	case e.Line > 0:
		what = fmt.Sprintf("document %d (%s, line %d)", e.Document, what, e.Line)
	case e.Document >= 0:
		what = fmt.Sprintf("document %d (%s)", e.Document, what)
	}
	return fmt.Sprintf("%s rejected (%s): %v", what, e.Reason, e.Err)
}

func (e *ObjectError) Unwrap() error { return e.Err }

// report logs a rejected object and counts it, in that order: whoever sees
// the count can find the log line (tests wait on the counter, then read
// the log).
func report(log *slog.Logger, m *Metrics, source string, e *ObjectError, attrs ...any) {
	kind := e.Kind
	if kind == "" {
		kind = "unknown"
	}
	args := append([]any{
		"kind", kind, "namespace", e.Namespace, "name", e.Name,
		"reason", e.Reason, "error", e.Err,
	}, attrs...)
	log.Warn("config object rejected", args...)
	m.ConfigErrors.WithLabelValues(source, kind, e.Reason).Inc()
}
