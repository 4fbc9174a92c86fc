package controllers

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/meshpilot/meshpilot/pkg/validation"
)

// ParseError is why a config file does not parse: what is wrong, and the
// line of the file where it is. Nothing in such a file can be trusted to
// say which objects it holds, so the file source keeps the objects of the
// file's last version that parsed.
type ParseError struct {
	// Line counts from 1 at the start of the file.
	Line int
	Err  error
}

func (e *ParseError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

func (e *ParseError) Unwrap() error { return e.Err }

// docText is one document of a file: its text, YAML or JSON, and the line
// of the file it starts on.
type docText struct {
	data   []byte
	line   int
	isJSON bool

	// tree is data parsed with positions, made on the first lookup.
	tree   *yamlv3.Node
	parsed bool
}

var utf8BOM = []byte("\xef\xbb\xbf")

// splitDocuments cuts a file into its documents as `kubectl apply -f` does:
// a file whose first character (after blanks) is "{" is a stream of JSON
// objects, any other is YAML documents separated by "---" lines. Blank
// documents (comments only) are left out.
func splitDocuments(data []byte) ([]*docText, error) {
	data = bytes.TrimPrefix(data, utf8BOM)
	if trimmed := bytes.TrimLeft(data, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '{' {
		return splitJSON(data)
	}
	return splitYAML(data)
}

func splitYAML(data []byte) ([]*docText, error) {
	var docs []*docText
	start, startLine, lineNo, offset := 0, 1, 0, 0
	emit := func(end int) {
		// A document starts at its first line that is not blank or a
		// comment, so that is the line its objects are reported at.
		doc, line := data[start:end], startLine
		for l := range bytes.Lines(doc) {
			if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
				docs = append(docs, &docText{data: doc, line: line})
				return
			}
			doc, line = doc[len(l):], line+1
		}
	}
	for line := range bytes.Lines(data) {
		lineNo++
		offset += len(line)
		if !bytes.HasPrefix(line, []byte("---")) {
			continue
		}
		// kubectl allows only a comment after a separator.
		if rest := bytes.TrimSpace(line[3:]); len(rest) > 0 && rest[0] != '#' {
			return nil, &ParseError{Line: lineNo, Err: fmt.Errorf("invalid document separator %q", bytes.TrimSpace(line))}
		}
		emit(offset - len(line))
		start, startLine = offset, lineNo+1
	}
	emit(len(data))
	return docs, nil
}

func splitJSON(data []byte) ([]*docText, error) {
	var docs []*docText
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		// The next value starts after the blanks that follow the last one.
		from := int(dec.InputOffset())
		from += len(data[from:]) - len(bytes.TrimLeft(data[from:], " \t\r\n"))
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			at := len(data)
			var syntax *json.SyntaxError
			if errors.As(err, &syntax) {
				at = int(syntax.Offset)
			}
			return nil, &ParseError{Line: lineAt(data, at), Err: fmt.Errorf("invalid JSON: %w", err)}
		}
		docs = append(docs, &docText{data: raw, line: lineAt(data, from), isJSON: true})
	}
}

// lineAt is the line of data that byte offset at is on, counting from 1.
func lineAt(data []byte, at int) int {
	return bytes.Count(data[:min(at, len(data))], []byte("\n")) + 1
}

var yamlLineRef = regexp.MustCompile(`\bline (\d+)\b`)

// yamlError turns a YAML parser error, whose lines count from the start of
// the document, into a ParseError whose lines count from the start of the
// file.
func (t *docText) yamlError(err error) *ParseError {
	first := 0
	// The parser places a problem it meets at the end of the input (an
	// unfinished mapping) on the line after the last; that line is not in
	// the file, so the document's last line with text is named instead.
	last := t.line + bytes.Count(bytes.TrimRight(t.data, " \t\r\n"), []byte("\n"))
	msg := yamlLineRef.ReplaceAllStringFunc(err.Error(), func(ref string) string {
		n, _ := strconv.Atoi(strings.TrimPrefix(ref, "line "))
		n = min(n+t.line-1, last)
		if first == 0 {
			first = n
		}
		return "line " + strconv.Itoa(n)
	})
	line := t.line
	if first > 0 {
		// The ParseError names the line: "yaml: line 9: x" reads "line 9: yaml: x".
		line, msg = first, strings.Replace(msg, "line "+strconv.Itoa(first)+": ", "", 1)
	}
	// Lists of errors ("yaml: unmarshal errors:\n  a\n  b") read on one line.
	parts := strings.Split(msg, "\n")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	if len(parts) > 1 {
		msg = parts[0] + " " + strings.Join(parts[1:], "; ")
	}
	return &ParseError{Line: line, Err: errors.New(msg)}
}

// locate gives every field error in err (as validation.FieldErrors finds
// them) the line of its field in the file; under is the path of the object
// within the document ("items[2]" for an item of a List, else "").
// Anything else is returned as it is.
func (t *docText) locate(err error, under string) error {
	fields := validation.FieldErrors(err)
	if fields == nil {
		return err
	}
	out := make(fieldErrors, 0, len(fields))
	for _, fe := range fields {
		located := *fe
		path := fe.Path
		if under != "" {
			path = under + "." + path
		}
		located.Line = t.lineOf(path)
		out = append(out, &located)
	}
	// In the order they are read in the file.
	slices.SortStableFunc(out, func(a, b *validation.FieldError) int { return cmp.Compare(a.Line, b.Line) })
	return out
}

// lineOf is the line in the file of the field at path ("spec.subsets[1]"),
// or of the deepest part of the path that the document has; the line the
// document starts on when the document cannot be read with positions.
func (t *docText) lineOf(path string) int {
	if !t.parsed {
		t.parsed = true
		var doc yamlv3.Node
		if yamlv3.Unmarshal(t.data, &doc) == nil && len(doc.Content) == 1 {
			t.tree = doc.Content[0]
		}
	}
	node, line := t.tree, 0
	for _, part := range splitPath(path) {
		for node != nil && node.Kind == yamlv3.AliasNode {
			node = node.Alias
		}
		if node == nil {
			break
		}
		var next *yamlv3.Node
		switch node.Kind {
		case yamlv3.MappingNode:
			for i := 0; i+1 < len(node.Content); i += 2 {
				if node.Content[i].Value == part {
					line, next = node.Content[i].Line, node.Content[i+1]
					break
				}
			}
		case yamlv3.SequenceNode:
			if i, err := strconv.Atoi(part); err == nil && i >= 0 && i < len(node.Content) {
				next = node.Content[i]
				line = next.Line
			}
		}
		node = next
	}
	if line == 0 {
		return t.line
	}
	return t.line + line - 1
}

// splitPath cuts a field path into its parts: "a.b[1].c[x.y]" is a, b, 1,
// c and x.y.
func splitPath(path string) []string {
	var parts []string
	for path != "" {
		switch path[0] {
		case '.':
			path = path[1:]
		case '[':
			end := strings.IndexByte(path, ']')
			if end < 0 {
				return append(parts, path[1:])
			}
			parts = append(parts, path[1:end])
			path = path[end+1:]
		default:
			end := strings.IndexAny(path, ".[")
			if end < 0 {
				end = len(path)
			}
			parts = append(parts, path[:end])
			path = path[end:]
		}
	}
	return parts
}

// fieldErrors are the problems of one object, each on its own line of the
// file; they read as one message.
type fieldErrors []*validation.FieldError

func (f fieldErrors) Error() string {
	msgs := make([]string, len(f))
	for i, fe := range f {
		msgs[i] = fe.Error()
	}
	return strings.Join(msgs, "; ")
}

func (f fieldErrors) Unwrap() []error {
	out := make([]error, len(f))
	for i, fe := range f {
		out[i] = fe
	}
	return out
}
