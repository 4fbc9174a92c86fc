package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/pilotbin"
	"github.com/meshpilot/meshpilot/internal/testlog"
	"github.com/meshpilot/meshpilot/internal/testport"
)

// TestQuickstart runs the quick start of README.md step by step, as the
// README writes it: `make run` (through the Makefile's own run recipe),
// the echo backends and client of examples/echo, the curl calls and the
// file edits. What each step's output block shows the client printing is
// what the client must print. When the README and the code drift apart,
// this test fails.
//
// The only liberties: programs are built once, ports are moved to free ones
// (with `make run ARGS=...`, as the README tells users to), and the example
// files are copies, so the repository is left as it was.
func TestQuickstart(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	steps, outputs := readQuickstart(t, filepath.Join(repo, "README.md"))
	q := &quickstart{t: t, repo: repo, dir: t.TempDir(), moved: t.TempDir(), ports: portMap{}}
	for _, p := range []string{"15010", "8080", "15014", "17070", "17071"} {
		q.ports[p] = testport.Port(t)
	}
	copyExamples(t, repo, q.dir, q.ports)
	began := time.Now()
	q.pilot = pilotbin.Path(t)
	q.echo = goBuild(t, repo, "./examples/echo")

	t.Logf("built pilot and echo in %s", time.Since(began).Round(time.Millisecond))
	for i, lines := range steps {
		n := i + 1
		stepBegan := time.Now()
		for _, line := range lines {
			cmd, err := parseShellLine(line)
			if err != nil {
				t.Fatalf("step %d: %v", n, err)
			}
			q.run(n, cmd)
		}
		if want := outputs[n]; want != nil {
			q.expectClient(n, answeredBy(want))
		}
		t.Logf("step %d done in %s", n, time.Since(stepBegan).Round(time.Millisecond))
	}
	stopBegan := time.Now()
	q.stopAll()
	t.Logf("stopped everything in %s", time.Since(stopBegan).Round(time.Millisecond))
	for _, p := range q.procs {
		if bad := errorLines(p.out.String()); len(bad) > 0 {
			t.Errorf("%q logged what looks like an error, with all well:\n%s", p.line, strings.Join(bad, "\n"))
		}
	}
	if q.client == nil {
		t.Fatal("the quick start never starts the client")
	}
	out := q.client.out.String()
	raced, failed := clientFailures(out)
	if len(failed) > 0 {
		t.Errorf("calls failed during the quick start:\n%s", out)
	}
	if len(raced) > 0 {
		t.Logf("grpc-go's route switch raced its balancer (see clientFailures):\n%s", strings.Join(raced, "\n"))
	}
	// Steps 5 and 6 each move the route to a cluster the client does not
	// hold at that moment: the race can strike once at each, no more.
	if len(raced) > 2 {
		t.Errorf("%d calls failed on grpc-go's route-switch race; it can strike at most twice:\n%s", len(raced), out)
	}
}

// clientRouteSwitchRace is how grpc-go fails a call made at the moment it
// switches to routes naming a cluster it did not hold: its ClientConn
// installs the resolver's new route table (the config selector) before the
// cluster manager balancer has a child for that cluster, and the balancer's
// picker fails the call (ClientConn.updateResolverStateAndUnlock in
// grpc-go v1.85.0; grpc-java fixed its own version of this race in
// grpc/grpc-java#11947). A cluster meshpilot had not sent would fail
// differently: A74's dependency manager waits for it, and the cds balancer
// reports it missing.
const clientRouteSwitchRace = "unknown cluster selected for RPC"

// clientFailures splits the client's failed calls into those of grpc-go's
// route-switch race and the rest.
func clientFailures(out string) (raced, failed []string) {
	for _, line := range strings.Split(out, "\n") {
		switch {
		case !strings.Contains(line, " failed: "):
		case strings.Contains(line, clientRouteSwitchRace):
			raced = append(raced, line)
		default:
			failed = append(failed, line)
		}
	}
	return raced, failed
}

type quickstart struct {
	t           *testing.T
	repo, dir   string
	moved       string // where the README's /tmp/ points
	ports       portMap
	pilot, echo string
	httpAddr    string
	procs       []*process
	client      *process
	servers     []string // node IDs of the running echo programs
	target      string   // the client's host:port
}

type process struct {
	line string
	cmd  *exec.Cmd
	out  *testlog.Buffer
	done chan struct{}
}

func (q *quickstart) run(step int, c shellCommand) {
	t := q.t
	switch {
	case len(c.args) >= 2 && c.args[0] == "make" && c.args[1] == "run":
		q.startPilot(step, c)
	case len(c.args) >= 3 && c.args[0] == "go" && c.args[1] == "run" && c.args[2] == "./examples/echo":
		q.startEcho(step, c)
	case c.args[0] == "curl":
		q.curl(step, c)
	case (c.args[0] == "mv" || c.args[0] == "cp") && len(c.args) == 3,
		c.args[0] == "rm" && len(c.args) == 2:
		q.fileOp(step, c)
	default:
		t.Fatalf("step %d runs %q, which this test cannot run; teach it (tests/e2e/quickstart_test.go)", step, c.line)
	}
}

// startPilot runs what `make run` runs: the test asks make for the recipe
// (make -n), so a change to the Makefile's run target is tested too.
func (q *quickstart) startPilot(step int, c shellCommand) {
	t := q.t
	args := fmt.Sprintf("ARGS=--xds-addr 127.0.0.1:%s --http-addr 127.0.0.1:%s --monitoring-addr 127.0.0.1:%s",
		q.ports["15010"], q.ports["8080"], q.ports["15014"])
	for _, a := range c.args[2:] {
		if strings.HasPrefix(a, "ARGS=") {
			t.Fatalf("step %d: %q sets ARGS, which this test uses to move the ports", step, c.line)
		}
	}
	out, err := exec.Command("make", "-s", "-n", "-C", q.repo, "run", args).Output()
	if err != nil {
		t.Fatalf("make -n run: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	recipe := strings.Fields(lines[len(lines)-1])
	if len(recipe) < 2 || recipe[0] != "bin/pilot" {
		t.Fatalf("make run ends with %q; want it to run bin/pilot", lines[len(lines)-1])
	}
	p := q.start(c.line, exec.Command(q.pilot, recipe[1:]...))
	q.httpAddr = "127.0.0.1:" + q.ports["8080"]
	waitUntil(t, 60*time.Second, func() bool { return httpStatus("http://"+q.httpAddr+"/ready") == http.StatusOK },
		func() string { return "make run never became ready:\n" + p.out.String() })
}

// startEcho runs a backend (-serve) until the end, waiting until it says it
// serves, or the client (-target), in the background unless it has -n.
func (q *quickstart) startEcho(step int, c shellCommand) {
	t := q.t
	args := make([]string, 0, len(c.args)-3)
	for _, a := range c.args[3:] {
		args = append(args, q.ports.apply(a))
	}
	cmd := exec.Command(q.echo, args...)
	cmd.Env = append(os.Environ(), c.env...)
	var bootstrap string
	for _, e := range c.env {
		if v, ok := strings.CutPrefix(e, "GRPC_XDS_BOOTSTRAP="); ok {
			bootstrap = v
		}
	}
	if bootstrap == "" {
		t.Fatalf("step %d: %q sets no GRPC_XDS_BOOTSTRAP", step, c.line)
	}
	node := q.nodeID(bootstrap)
	p := q.start(c.line, cmd)
	switch {
	case slices.Contains(args, "-serve"):
		q.servers = append(q.servers, node)
		waitUntil(t, 60*time.Second, func() bool { return strings.Contains(p.out.String(), " serving on ") },
			func() string { return c.line + " never served:\n" + p.out.String() })
	case slices.Contains(args, "-target"):
		q.client = p
		q.target = strings.TrimPrefix(args[slices.Index(args, "-target")+1], "xds:///")
	default:
		t.Fatalf("step %d: %q neither serves nor calls", step, c.line)
	}
}

// nodeID reads the node ID of a bootstrap file, relative to the examples'
// copy as the README's paths are relative to the repository.
func (q *quickstart) nodeID(path string) string {
	data, err := os.ReadFile(filepath.Join(q.dir, path))
	if err != nil {
		q.t.Fatalf("bootstrap: %v", err)
	}
	var b struct {
		Node struct {
			ID string `json:"id"`
		} `json:"node"`
	}
	if err := json.Unmarshal(data, &b); err != nil || b.Node.ID == "" {
		q.t.Fatalf("bootstrap %s has no node ID (%v)", path, err)
	}
	return b.Node.ID
}

func (q *quickstart) start(line string, cmd *exec.Cmd) *process {
	p := &process{line: line, cmd: cmd, out: &testlog.Buffer{}, done: make(chan struct{})}
	cmd.Dir = q.dir
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		q.t.Fatalf("%s: %v", line, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	q.procs = append(q.procs, p)
	q.t.Cleanup(func() { stopProcess(p) })
	return p
}

// curl checks that a debug URL answers with JSON about the proxies the
// README has started.
func (q *quickstart) curl(step int, c shellCommand) {
	t := q.t
	var raw string
	for _, a := range c.args[1:] {
		if !strings.HasPrefix(a, "-") {
			raw = a
		}
	}
	u, err := url.Parse("http://" + strings.TrimPrefix(q.ports.apply(raw), "http://"))
	if err != nil || u.Port() != q.ports["8080"] {
		t.Fatalf("step %d: %q is not a URL of the debug port", step, c.line)
	}
	u.Host = q.httpAddr
	resp, err := http.Get(u.String())
	if err != nil {
		t.Fatalf("step %d: %v", step, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !json.Valid(body) {
		t.Fatalf("step %d: %s: %d, valid JSON %v:\n%s", step, c.line, resp.StatusCode, json.Valid(body), body)
	}
	// syncz lists every connected proxy; one proxy's config dump holds the
	// listener the client dials (the dump's layout is Envoy's, which names
	// resources, not the proxy).
	want := q.servers
	if u.Query().Get("proxyID") != "" {
		if q.target == "" {
			t.Fatalf("step %d: %q dumps a proxy's config before any client runs", step, c.line)
		}
		want = []string{q.target}
	}
	for _, id := range want {
		if !strings.Contains(string(body), id) {
			t.Errorf("step %d: %s does not mention %s:\n%.2000s", step, c.line, id, body)
		}
	}
}

// fileOp moves, copies or removes a file of the examples' copy; the
// README's /tmp/ is a directory of the test's own. A copy is written to a
// temporary name and renamed, as an editor saves, so the directory source
// never reads half a file.
func (q *quickstart) fileOp(step int, c shellCommand) {
	path := func(p string) string {
		if rest, ok := strings.CutPrefix(p, "/tmp/"); ok {
			return filepath.Join(q.moved, rest)
		}
		if filepath.IsAbs(p) {
			q.t.Fatalf("step %d: %q touches a file outside the repository", step, c.line)
		}
		return filepath.Join(q.dir, p)
	}
	var err error
	switch c.args[0] {
	case "rm":
		err = os.Remove(path(c.args[1]))
	case "mv", "cp":
		from, to := path(c.args[1]), path(c.args[2])
		if strings.HasSuffix(c.args[2], "/") {
			to = filepath.Join(to, filepath.Base(from))
		}
		if c.args[0] == "mv" {
			err = os.Rename(from, to)
			break
		}
		var data []byte
		if data, err = os.ReadFile(from); err == nil {
			tmp := filepath.Join(q.moved, ".copy-"+filepath.Base(to))
			if err = os.WriteFile(tmp, data, 0o644); err == nil {
				err = os.Rename(tmp, to)
			}
		}
	}
	if err != nil {
		q.t.Fatalf("step %d: %v", step, err)
	}
}

// expectClient waits until the client's answers settle on exactly the
// backends that the README shows after the step: four answers in a row
// from them, each of them among those four.
func (q *quickstart) expectClient(step int, want []string) {
	t := q.t
	if q.client == nil {
		t.Fatalf("step %d shows the client's output before any step starts it", step)
	}
	if len(want) == 0 {
		t.Fatalf("step %d's output block shows no answered call", step)
	}
	from := len(answeredBy(strings.Split(q.client.out.String(), "\n")))
	var last []string
	waitUntil(t, 30*time.Second, func() bool {
		got := answeredBy(strings.Split(q.client.out.String(), "\n"))[from:]
		if len(got) < 4 {
			return false
		}
		last = got[len(got)-4:]
		return sameSet(last, want)
	}, func() string {
		return fmt.Sprintf("after step %d the client's last answers are %v; the README shows %v:\n%s", step, last, want, q.client.out.String())
	})
}

func (q *quickstart) stopAll() {
	for _, p := range slices.Backward(q.procs) {
		stopProcess(p)
	}
}

// stopProcess interrupts a process as Ctrl-C would, and kills it if it lingers.
func stopProcess(p *process) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// errorLines are the lines of a log that an operator would read as an
// error: slog's ERROR and WARN levels, and grpc-go's "ERROR:" prefix.
func errorLines(log string) []string {
	var bad []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") || strings.Contains(l, " ERROR: ") {
			bad = append(bad, l)
		}
	}
	return bad
}

func goBuild(t *testing.T, repo, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

func httpStatus(u string) int {
	resp, err := http.Get(u)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func waitUntil(t *testing.T, d time.Duration, ok func() bool, why func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal(why())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestClientFailures(t *testing.T) {
	out := "call 7 answered by echo-v2\n" +
		"call 8 failed: rpc error: code = Unavailable desc = unknown cluster selected for RPC: \"cluster:outbound|7070||echo.demo.svc.cluster.local\"\n" +
		"call 9 failed: rpc error: code = Unavailable desc = no healthy upstream\n" +
		"answered: echo-v1 5 echo-v2 11, failed 2\n" +
		"2026/12/05 14:40:04 2 of the calls failed\n"
	raced, failed := clientFailures(out)
	if len(raced) != 1 || !strings.HasPrefix(raced[0], "call 8 ") {
		t.Errorf("raced = %q, want call 8 alone", raced)
	}
	if len(failed) != 1 || !strings.HasPrefix(failed[0], "call 9 ") {
		t.Errorf("failed = %q, want call 9 alone", failed)
	}
}
