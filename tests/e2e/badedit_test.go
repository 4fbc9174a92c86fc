package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// TestBadEditKeepsLastGoodConfig edits the files of `pilot discovery
// --config-dir` under a real grpc-go client that calls all along, failing
// fast: a file that no longer parses changes nothing (wherever the error
// is, and whatever else the edit changed) and is reported in the log, the
// metrics and /debug/pushcontext; fixed, it applies; a document that parses
// but is invalid drops only its own object; a deleted file deletes its
// objects. No call fails, and none sees "resource has been removed".
func TestBadEditKeepsLastGoodConfig(t *testing.T) {
	const ns = "bad-edit"
	ip := hostIP(t)
	host := fmt.Sprintf("echo.%s.svc.cluster.local", ns)
	fx := fixtures{NS: ns, IP: ip, Host: host}
	m := newDirMesh(t)
	m.apply(t, "namespace", fx.render(namespaceYAML))
	m.apply(t, "rule", fx.render(ruleYAML))
	cp := startControlPlane(t, m)
	a := startBackend(t, cp, ip, ns, "echo-a", map[string]string{"app": "echo", "version": "v1"})
	b := startBackend(t, cp, ip, ns, "echo-b", map[string]string{"app": "echo", "version": "v2"})
	// One file holds the Service, both Pods and both EndpointSlices, as
	// examples/mesh/echo.yaml did.
	withoutB := fx.render(serviceYAML) + "---" + fx.render(sliceYAML, "echo-a", a.port)
	sliceB := fx.render(sliceYAML, "echo-b", b.port)
	echo := withoutB + "---" + sliceB
	m.apply(t, "echo", echo)
	echoPath := filepath.Join(m.dir, "echo.yaml")

	c := newClient(t, cp, ip, ns, "xds:///"+host+":7070")
	waitFor(t, 30*time.Second, "both backends to answer", func() error { return answersFrom(c, "echo-a", "echo-b") })
	calls := keepCalling(t, c)

	t.Run("a file that no longer parses changes nothing", func(t *testing.T) {
		// The broken versions also drop echo-b's slice: that edit must not
		// apply either.
		for round, edit := range []struct {
			old, new string
			// at is the text on the line the error is reported at (YAML
			// may report the line before).
			at string
		}{
			// Two lines run together into the Service's kind: the
			// document is there, but whose is it?
			{"kind: Service\n", "kind: Service\n  - [unclosed\n", "apiVersion: v1\nkind: Service"},
			// Syntax errors in echo-a's slice: an unclosed list, a tab.
			{"endpoints:\n", "endpoints:\n  - [unclosed\n", "- [unclosed"},
			{"  conditions: {ready: true}", "\tconditions: {ready: true}", "\tconditions"},
		} {
			broken := strings.Replace(withoutB, edit.old, edit.new, 1)
			m.apply(t, "echo", broken)
			problem := waitForSourceProblem(t, cp, echoPath, "does not parse")
			wantLine := strings.Count(broken[:strings.Index(broken, edit.at)], "\n") + 1
			if problem.Line < wantLine-1 || problem.Line > wantLine || !strings.Contains(problem.Message, "does not parse") {
				t.Errorf("round %d: problem %+v, want one about line %d", round, problem, wantLine)
			}
			// Past the debounce, both backends still answer.
			time.Sleep(300 * time.Millisecond)
			if err := answersFrom(c, "echo-a", "echo-b"); err != nil {
				t.Errorf("round %d, with the file broken: %v", round, err)
			}
			if got := cp.metric(t, "meshpilot_config_files_rejected"); got != 1 {
				t.Errorf("round %d: meshpilot_config_files_rejected = %v, want 1", round, got)
			}
			m.apply(t, "echo", echo)
			waitForSourceProblems(t, cp, 0)
		}
		if got := cp.metric(t, "meshpilot_config_errors_total", "reason", "parse"); got != 3 {
			t.Errorf("meshpilot_config_errors_total{reason=parse} = %v, want 3", got)
		}
	})

	t.Run("the file parsing again applies its edit", func(t *testing.T) {
		m.apply(t, "echo", withoutB)
		waitFor(t, 30*time.Second, "echo-a alone to answer", func() error { return answersFrom(c, "echo-a") })
		if got := cp.metric(t, "meshpilot_config_files_rejected"); got != 0 {
			t.Errorf("meshpilot_config_files_rejected = %v, want 0", got)
		}
	})

	t.Run("an invalid document drops only its own object", func(t *testing.T) {
		m.apply(t, "echo", echo)
		waitFor(t, 30*time.Second, "both backends to answer", func() error { return answersFrom(c, "echo-a", "echo-b") })
		// echo-a's slice gets a field EndpointSlices do not have.
		invalid := strings.Replace(echo, "conditions: {ready: true}", "conditions: {ready: true}\n  zones: [a]", 1)
		m.apply(t, "echo", invalid)
		waitFor(t, 30*time.Second, "echo-b alone to answer", func() error { return answersFrom(c, "echo-b") })
		problem := waitForSourceProblem(t, cp, echoPath, "zones")
		wantLine := strings.Count(invalid[:strings.Index(invalid, "zones:")], "\n") + 1
		if problem.Kind != "EndpointSlice" || problem.Name != "echo-a" ||
			!strings.Contains(problem.Message, fmt.Sprintf("line %d: endpoints[0].zones: unknown field", wantLine)) {
			t.Errorf("problem %+v, want echo-a's zones at line %d", problem, wantLine)
		}

		// A DestinationRule with a misspelt field is dropped; the service
		// stays, with the default load balancer.
		m.apply(t, "rule", strings.Replace(fx.render(ruleYAML), "loadBalancer: {simple: LEAST_REQUEST}",
			"loadBalancer: {simpel: LEAST_REQUEST}", 1))
		waitFor(t, 30*time.Second, "the rule to be dropped", func() error { return lbPolicy(t, cp, ns, host, clusterv3.Cluster_ROUND_ROBIN) })
		problem = waitForSourceProblem(t, cp, filepath.Join(m.dir, "rule.yaml"), "simpel")
		if !strings.Contains(problem.Message, "spec.trafficPolicy.loadBalancer.simpel: unknown field (did you mean simple?)") {
			t.Errorf("problem %+v, want the rule's misspelt field", problem)
		}
		if err := answersFrom(c, "echo-b"); err != nil {
			t.Error(err)
		}
	})

	t.Run("a deleted file deletes its objects", func(t *testing.T) {
		// echo-b's slice moves to a file of its own: written there first,
		// it is never missing.
		m.apply(t, "slice-b", sliceB)
		m.apply(t, "echo", withoutB)
		m.apply(t, "rule", fx.render(ruleYAML))
		waitFor(t, 30*time.Second, "both backends to answer", func() error { return answersFrom(c, "echo-a", "echo-b") })
		waitFor(t, 30*time.Second, "the rule", func() error { return lbPolicy(t, cp, ns, host, clusterv3.Cluster_LEAST_REQUEST) })
		waitForSourceProblems(t, cp, 0)

		m.remove(t, "slice-b")
		waitFor(t, 30*time.Second, "echo-a alone to answer", func() error { return answersFrom(c, "echo-a") })
		m.remove(t, "rule")
		waitFor(t, 30*time.Second, "the rule to go", func() error { return lbPolicy(t, cp, ns, host, clusterv3.Cluster_ROUND_ROBIN) })
	})

	if n, failed, errs := calls.stop(); failed > 0 || n < 100 {
		t.Errorf("%d of the %d calls made through the edits failed (first: %v); want at least 100 calls, all answered",
			failed, n, errs)
	}
	if n := cp.nacks(t); n != 0 {
		t.Errorf("the clients sent %v NACKs", n)
	}
}

// answersFrom makes calls until each of ids has answered, and fails if
// another backend answers or a call fails.
func answersFrom(c *client, ids ...string) error {
	seen, err := c.callN(10 * len(ids))
	if err != nil {
		return err
	}
	for id := range seen {
		if !strings.Contains(strings.Join(ids, " "), id) {
			return fmt.Errorf("answers by backend %v, want only %v", seen, ids)
		}
	}
	for _, id := range ids {
		if seen[id] == 0 {
			return fmt.Errorf("answers by backend %v, want %v", seen, ids)
		}
	}
	return nil
}

// backgroundCalls are calls made every few milliseconds that fail fast (no
// wait for a ready channel), so a removed resource shows at once.
type backgroundCalls struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	// n calls were made, failed of them failed; errs are the first errors.
	n, failed int
	errs      []error
}

func keepCalling(t *testing.T, c *client) *backgroundCalls {
	ctx, cancel := context.WithCancel(context.Background())
	bc := &backgroundCalls{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(bc.done)
		for ctx.Err() == nil {
			callCtx, cancelCall := context.WithTimeout(ctx, 5*time.Second)
			_, err := c.rpc.UnaryCall(callCtx, &testpb.SimpleRequest{})
			cancelCall()
			bc.mu.Lock()
			bc.n++
			if err != nil && ctx.Err() == nil {
				bc.failed++
				if len(bc.errs) < 3 {
					bc.errs = append(bc.errs, err)
				}
			}
			bc.mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { bc.stop() })
	return bc
}

// stop ends the calls and says how many were made, how many failed, and
// the first errors.
func (bc *backgroundCalls) stop() (n, failed int, errs []error) {
	bc.cancel()
	<-bc.done
	bc.mu.Lock()
	defer bc.mu.Unlock()
	return bc.n, bc.failed, bc.errs
}

// sourceProblemsOf reads what /debug/pushcontext says the sources could not
// read.
func sourceProblemsOf(t *testing.T, cp *controlPlane) []model.SourceProblem {
	t.Helper()
	code, body := cp.get(t, "/debug/pushcontext")
	if code != 200 {
		t.Fatalf("/debug/pushcontext: %d %s", code, body)
	}
	var summary pushcontext.Summary
	if err := json.Unmarshal([]byte(body), &summary); err != nil {
		t.Fatalf("/debug/pushcontext: %v", err)
	}
	return summary.SourceProblems
}

// waitForSourceProblem waits until /debug/pushcontext reports exactly one
// problem of file, whose message contains text, and returns it.
func waitForSourceProblem(t *testing.T, cp *controlPlane, file, text string) model.SourceProblem {
	t.Helper()
	var found model.SourceProblem
	waitFor(t, 30*time.Second, fmt.Sprintf("a problem of %s with %q in /debug/pushcontext", file, text), func() error {
		var of []model.SourceProblem
		for _, p := range sourceProblemsOf(t, cp) {
			if p.File == file {
				of = append(of, p)
			}
		}
		if len(of) != 1 || !strings.Contains(of[0].Message, text) {
			return fmt.Errorf("problems of %s: %+v", file, of)
		}
		found = of[0]
		return nil
	})
	return found
}

func waitForSourceProblems(t *testing.T, cp *controlPlane, n int) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("%d problems in /debug/pushcontext", n), func() error {
		if got := sourceProblemsOf(t, cp); len(got) != n {
			return fmt.Errorf("problems: %+v", got)
		}
		return nil
	})
}

// lbPolicy checks the load balancer of host's default cluster as a client
// in namespace ns is sent it.
func lbPolicy(t *testing.T, cp *controlPlane, ns, host string, want clusterv3.Cluster_LbPolicy) error {
	cluster := fmt.Sprintf("outbound|7070||%s", host)
	if got := clustersOf(t, fetch(t, cp, ns, clusterType, cluster))[cluster].GetLbPolicy(); got != want {
		return fmt.Errorf("%s lb policy %v, want %v", cluster, got, want)
	}
	return nil
}
