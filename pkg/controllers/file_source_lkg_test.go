package controllers

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// echoFile holds a Service, its Pod and its EndpointSlice in one file, as
// examples/mesh/echo.yaml does.
var echoFile = serviceYAML + "---\n" + podYAML + "---\n" + sliceYAML

// storeState is what a reader of the store sees of the objects in echoFile
// and drYAML.
func storeState(s model.Store) string {
	var parts []string
	if svc := s.Service(reviews); svc != nil {
		parts = append(parts, fmt.Sprintf("service %s:%v", svc.Hostname, svc.ClusterIPs))
	}
	for _, ep := range s.Endpoints(reviews) {
		parts = append(parts, fmt.Sprintf("endpoint %s:%d %s", ep.Address, ep.Port, ep.Labels["version"]))
	}
	for _, w := range s.Workloads() {
		parts = append(parts, "pod "+w.Name)
	}
	for _, dr := range drHosts(s) {
		parts = append(parts, "rule "+dr)
	}
	return strings.Join(parts, ", ")
}

func problemsOf(s model.Store) []string {
	var out []string
	for _, p := range s.SourceProblems() {
		out = append(out, fmt.Sprintf("%s:%d %s", filepath.Base(p.File), p.Line, p.Message))
	}
	return out
}

// TestFileSourceKeepsLastGoodVersion: a file that stops parsing changes
// nothing, wherever the error is, and says so (log, metrics, the store's
// problems); one that parses again is applied; a document that parses but
// is invalid drops its object only; a deleted file deletes its objects.
func TestFileSourceKeepsLastGoodVersion(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "echo.yaml", echoFile)
	writeFile(t, dir, "dr.yaml", drYAML)
	h := startFileSource(t, dir)
	const good = "service reviews.ns.svc.cluster.local:[10.0.0.10], endpoint 10.244.1.5:8080 v1, pod reviews-v1, rule ns/reviews=reviews"
	if got := storeState(h.store); got != good {
		t.Fatalf("initial load: %s", got)
	}

	// Broken in each of its documents in turn, the file changes nothing,
	// not even the edit made beside the error (a new cluster IP).
	edited := strings.Replace(echoFile, "10.0.0.10", "10.0.0.99", 1)
	for i, at := range []string{"selector: {app: reviews}", "serviceAccountName: reviews", "addressType: IPv4"} {
		broken := strings.Replace(edited, at, at+"\n  - not: [valid", 1)
		line := lineAt([]byte(broken), strings.Index(broken, "- not:"))
		writeFile(t, dir, "echo.yaml", broken)
		eventually(t, "the problem to be published", func() bool { return len(h.store.SourceProblems()) == 1 })
		if got := storeState(h.store); got != good {
			t.Errorf("after breaking near %q: %s", at, got)
		}
		problem := h.store.SourceProblems()[0]
		// YAML reports the line where it noticed: at most one before.
		if problem.Line < line-1 || problem.Line > line || !strings.Contains(problem.Message, "does not parse: line") ||
			!strings.Contains(problem.Message, "the 3 objects of its last version that did are served") {
			t.Errorf("problem %+v, want one about line %d", problem, line)
		}
		if got := gaugeValue(t, h.metrics.FilesRejected); got != 1 {
			t.Errorf("files rejected = %v, want 1", got)
		}
		if got := h.errorCount("unknown", ReasonParse); got != float64(i+1) {
			t.Errorf("parse errors = %v, want %d", got, i+1)
		}
		// Fixed again, for the next round.
		writeFile(t, dir, "echo.yaml", echoFile)
		eventually(t, "the fixed file to clear the problem", func() bool { return len(h.store.SourceProblems()) == 0 })
	}
	if !strings.Contains(h.logs.String(), "config file does not parse; its objects stay as they were") ||
		!strings.Contains(h.logs.String(), "config file parses again") {
		t.Errorf("logs lack the parse failure or the recovery:\n%s", h.logs.String())
	}

	// A change to another file applies while the broken file keeps its
	// objects, and the broken file is not reported again.
	writeFile(t, dir, "echo.yaml", strings.Replace(echoFile, "kind: Pod", "kind: Pod\n  - [", 1))
	eventually(t, "the problem to be published", func() bool { return len(h.store.SourceProblems()) == 1 })
	parseErrors := h.errorCount("unknown", ReasonParse)
	writeFile(t, dir, "dr.yaml", strings.Replace(drYAML, "host: reviews", "host: reviews.ns.svc.cluster.local", 1))
	eventually(t, "the other file's change", func() bool {
		return slices.Equal(drHosts(h.store), []string{"ns/reviews=reviews.ns.svc.cluster.local"})
	})
	if h.store.Service(reviews) == nil || len(h.store.Endpoints(reviews)) != 1 {
		t.Errorf("the broken file's objects went on another file's change: %s", storeState(h.store))
	}
	if got := h.errorCount("unknown", ReasonParse); got != parseErrors {
		t.Errorf("the unchanged broken file was reported again (%v parse errors, want %v)", got, parseErrors)
	}

	// Fixed with a change: the change applies.
	writeFile(t, dir, "echo.yaml", strings.Replace(echoFile, "10.0.0.10", "10.0.0.11", 1))
	eventually(t, "the fixed file's change", func() bool {
		svc := h.store.Service(reviews)
		return svc != nil && slices.Equal(svc.ClusterIPs, []string{"10.0.0.11"})
	})
	eventually(t, "no problems left", func() bool { return len(h.store.SourceProblems()) == 0 })
	if got := gaugeValue(t, h.metrics.FilesRejected); got != 0 {
		t.Errorf("files rejected = %v, want 0", got)
	}

	// A document that parses but is invalid drops only its object, and
	// the problem names its field and line.
	badSlice := strings.Replace(echoFile, "conditions: {ready: true}", "conditions: {ready: true}\n  zones: [z1]", 1)
	writeFile(t, dir, "echo.yaml", badSlice)
	eventually(t, "the invalid slice to go", func() bool { return len(h.store.Endpoints(reviews)) == 0 })
	if h.store.Service(reviews) == nil || len(h.store.Workloads()) != 1 {
		t.Errorf("valid objects of the file went with the invalid one: %s", storeState(h.store))
	}
	line := lineAt([]byte(badSlice), strings.Index(badSlice, "zones:"))
	want := []string{fmt.Sprintf("echo.yaml:%d rejected (decode): line %d: endpoints[0].zones: unknown field",
		lineAt([]byte(badSlice), strings.Index(badSlice, "apiVersion: discovery.k8s.io/v1")), line)}
	if diff := cmp.Diff(want, problemsOf(h.store)); diff != "" {
		t.Errorf("problems (-want +got)\n%s", diff)
	}

	// A deleted file deletes its objects, even after failing to parse.
	writeFile(t, dir, "echo.yaml", "{broken")
	eventually(t, "the problem to be published", func() bool {
		p := h.store.SourceProblems()
		return len(p) == 1 && strings.Contains(p[0].Message, "invalid JSON")
	})
	if err := os.Remove(filepath.Join(dir, "echo.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted file's objects to go", func() bool {
		return h.store.Service(reviews) == nil && len(h.store.Workloads()) == 0 && len(h.store.SourceProblems()) == 0
	})
	if got := storeState(h.store); got != "rule ns/reviews=reviews.ns.svc.cluster.local" {
		t.Errorf("after deleting echo.yaml: %s", got)
	}
}

// A file that never parsed has nothing to keep: it loads nothing, and the
// problem says so.
func TestFileSourceBrokenFromTheStart(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "echo.yaml", serviceYAML+"---\n"+podYAML+"  bad: [\n")
	h := startFileSource(t, dir)
	if got := storeState(h.store); got != "" {
		t.Errorf("loaded %s from a file that does not parse", got)
	}
	want := []string{"echo.yaml:26 does not parse: line 26: yaml: did not find expected node content; " +
		"the 0 objects of its last version that did are served"}
	if diff := cmp.Diff(want, problemsOf(h.store)); diff != "" {
		t.Errorf("problems (-want +got)\n%s", diff)
	}
}

// TestFileSourceValidationLines: an object the ingester refuses (a
// DestinationRule that breaks Istio's rules) is reported with the lines of
// its fields, and withdrawn.
func TestFileSourceValidationLines(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "rules.yaml", drYAML+"---\n"+invalidDRYAML)
	h := startFileSource(t, dir)
	// The rule has no host: its line is the nearest field there is, spec.
	want := []string{`rules.yaml:11 rejected (invalid): line 16: spec.host: host is required; ` +
		`line 19: spec.subsets[1].name: duplicate subset name "v1"`}
	if diff := cmp.Diff(want, problemsOf(h.store)); diff != "" {
		t.Errorf("problems (-want +got)\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ns/reviews=reviews"}, drHosts(h.store)); diff != "" {
		t.Errorf("destination rules (-want +got)\n%s", diff)
	}
	// An unrelated edit of the file keeps reporting the unchanged rule.
	writeFile(t, dir, "rules.yaml", "# edited\n"+drYAML+"---\n"+invalidDRYAML)
	eventually(t, "the edit", func() bool {
		return slices.Equal(problemsOf(h.store), []string{`rules.yaml:12 rejected (invalid): line 17: spec.host: host is required; ` +
			`line 20: spec.subsets[1].name: duplicate subset name "v1"`})
	})
	if got := h.errorCount("DestinationRule", ReasonInvalid); got != 1 {
		t.Errorf("the unchanged rule was reported %v times, want once", got)
	}
}
