package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A quick-start block of README.md holds the commands of one step, or what
// the client prints after it. The README marks each with an HTML comment,
// which renders as nothing, right before its fenced block.
var quickstartMarker = regexp.MustCompile("(?s)<!-- quickstart:(step|output) (\\d+) -->\\s*```[a-z]*\\n(.*?)```")

// readQuickstart returns the steps and the outputs of the README's quick
// start, in order. Steps are numbered 1, 2, 3... with none missing, so a
// step that lost its marker is noticed.
func readQuickstart(t *testing.T, readme string) (steps [][]string, outputs map[int][]string) {
	t.Helper()
	data, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	outputs = map[int][]string{}
	for _, m := range quickstartMarker.FindAllStringSubmatch(string(data), -1) {
		n, _ := strconv.Atoi(m[2])
		var lines []string
		for _, l := range strings.Split(m[3], "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				lines = append(lines, l)
			}
		}
		if m[1] == "output" {
			outputs[n] = lines
			continue
		}
		if n != len(steps)+1 {
			t.Fatalf("%s: quick-start step %d follows step %d; number the steps 1, 2, 3...", readme, n, len(steps))
		}
		steps = append(steps, lines)
	}
	if len(steps) == 0 {
		t.Fatalf("%s has no <!-- quickstart:step N --> blocks", readme)
	}
	for n := range outputs {
		if n < 1 || n > len(steps) {
			t.Fatalf("%s: quick-start output %d belongs to no step", readme, n)
		}
	}
	return steps, outputs
}

// shellCommand is one line of a step, split as the shell would split it:
// leading NAME=value words are its environment.
type shellCommand struct {
	line string
	env  []string
	args []string
}

func parseShellLine(line string) (shellCommand, error) {
	words, err := splitShellWords(line)
	if err != nil {
		return shellCommand{}, fmt.Errorf("%q: %w", line, err)
	}
	cmd := shellCommand{line: line}
	for len(words) > 0 && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(words[0]) {
		cmd.env, words = append(cmd.env, words[0]), words[1:]
	}
	if len(words) == 0 {
		return shellCommand{}, fmt.Errorf("%q runs nothing", line)
	}
	cmd.args = words
	return cmd, nil
}

// splitShellWords splits on blanks, honouring single and double quotes. The
// README's commands need nothing more; anything that would need the shell
// (variables, pipes, redirections) is refused so that this test cannot
// silently run something other than what the README shows.
func splitShellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
		case c == '\'' || c == '"':
			end := strings.IndexByte(s[i+1:], c)
			if end < 0 {
				return nil, fmt.Errorf("unclosed %c", c)
			}
			quoted := s[i+1 : i+1+end]
			if c == '"' && strings.ContainsAny(quoted, "$`\\") {
				return nil, fmt.Errorf("double quotes with expansions are not supported")
			}
			cur.WriteString(quoted)
			inWord = true
			i += end + 1
		case strings.IndexByte("$`\\|&;<>(){}*?", c) >= 0:
			return nil, fmt.Errorf("shell syntax %q is not supported", c)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// portMap moves the README's fixed ports to free ones, so that the test
// runs beside anything else on the machine, a real `make run` included.
type portMap map[string]string

func (p portMap) apply(s string) string {
	for from, to := range p {
		s = regexp.MustCompile(`\b`+from+`\b`).ReplaceAllString(s, to)
	}
	return s
}

// copyExamples copies examples/mesh, examples/bootstrap and examples/routing into dir with
// the ports moved, so the steps' relative paths find them and their edits
// leave the repository alone.
func copyExamples(t *testing.T, repo, dir string, ports portMap) {
	t.Helper()
	for _, sub := range []string{"examples/mesh", "examples/bootstrap", "examples/routing"} {
		entries, err := os.ReadDir(filepath.Join(repo, sub))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			data, err := os.ReadFile(filepath.Join(repo, sub, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, sub, e.Name()), []byte(ports.apply(string(data))), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// answeredBy lists, in order, the backends that lines of the client's
// output name ("call N answered by ID").
func answeredBy(lines []string) []string {
	var ids []string
	for _, l := range lines {
		if m := callAnswered.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			ids = append(ids, m[1])
		}
	}
	return ids
}

var callAnswered = regexp.MustCompile(`^call \d+ answered by (\S+)$`)

// sameSet reports whether got names exactly the backends of want.
func sameSet(got, want []string) bool {
	g, w := slices.Clone(got), slices.Clone(want)
	slices.Sort(g)
	slices.Sort(w)
	return slices.Equal(slices.Compact(g), slices.Compact(w))
}

// TestSplitShellWords: the splitter takes what the README's commands use
// and refuses what would need a real shell, rather than misreading it.
func TestSplitShellWords(t *testing.T) {
	cases := []struct {
		line    string
		want    []string
		wantErr bool
	}{
		{"make run", []string{"make", "run"}, false},
		{"A=b go run ./x -n 3", []string{"A=b", "go", "run", "./x", "-n", "3"}, false},
		{`make run ARGS="--xds-addr 127.0.0.1:25010"`, []string{"make", "run", "ARGS=--xds-addr 127.0.0.1:25010"}, false},
		{"curl -s 'localhost:8080/x?a=b~c'", []string{"curl", "-s", "localhost:8080/x?a=b~c"}, false},
		{"echo $HOME", nil, true},
		{"a | b", nil, true},
		{"a > f", nil, true},
		{`echo "$x"`, nil, true},
		{"echo 'open", nil, true},
	}
	for _, tc := range cases {
		got, err := splitShellWords(tc.line)
		if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
			t.Errorf("splitShellWords(%q) = %q, %v; want %q, error %v", tc.line, got, err, tc.want, tc.wantErr)
		}
	}
}
