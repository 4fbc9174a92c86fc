package xds

import (
	"fmt"
	"strings"
	"time"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// How the convergence test knows when to compare, and what it compares.

// awaitSentinel moves the sentinel Service's one endpoint (see
// convSentinel) and waits until the served push context has it. The push
// loop takes changes in order, so every step before it has then been
// built, and pushed or is being pushed. An endpoint change leaves the
// steps' own pushes as they were: had the last step been an endpoint
// change alone, a config change written right after it would have made
// its push a full one, pushed in the debounce window of the config change,
// which proves less. (A config change that is already waiting to be
// pushed takes the endpoint change along, as it would any other.)
func awaitSentinel(h *harness, checkpoint int) {
	h.t.Helper()
	address := moveSentinel(h.store, checkpoint)
	h.eventuallyWithin("the push of the last step", convSettleLimit, func() bool {
		eps := h.server.PushContext().Endpoints(convSentinel.host(), 80, nil)
		return len(eps) == 1 && eps[0].Address == address
	})
}

// moveSentinel gives the sentinel Service the endpoint of checkpoint, and
// returns its address.
func moveSentinel(st model.Store, checkpoint int) string {
	address := fmt.Sprintf("10.255.0.%d", 1+checkpoint%2)
	st.SetEndpoints(convSentinel.key(), "sentinel", []*model.Endpoint{{Address: address, Port: 8080,
		ServicePortName: "http", Namespace: convSentinel.ns, Labels: map[string]string{"app": "sentinel"}, FromPod: true}})
	return address
}

// awaitConvergence polls until every client is warm and has answered
// every response, every long-lived client holds what its fresh client
// holds, and the server has nothing left to send. It returns what still
// fails after convSettleLimit, or "". Polls compare cheaply; only a
// failure is described in full.
func awaitConvergence(h *harness, pairs []*convPair) string {
	deadline := time.Now().Add(convSettleLimit)
	for !converged(h, pairs) {
		if time.Now().After(deadline) {
			return convergenceProblems(h, pairs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return ""
}

// converged is what awaitConvergence waits for. A client that is warm may
// still hold dangling references: a random world routes to subsets that
// no rule defines, as a real one may. The fresh client must then dangle
// in the same places, which the comparison tells.
func converged(h *harness, pairs []*convPair) bool {
	for _, p := range pairs {
		for _, c := range []convClient{p.long, p.fresh} {
			if c.Err() != nil || len(c.Nacks()) > 0 || len(unsettled(c)) > 0 {
				return false
			}
		}
	}
	if len(serverBusy(h)) > 0 {
		return false
	}
	for _, p := range pairs {
		if !sameSnapshot(p.long.Active(), p.fresh.Active()) {
			return false
		}
	}
	return true
}

// convergenceProblems describes why converged does not hold.
func convergenceProblems(h *harness, pairs []*convPair) string {
	var out []string
	for _, p := range pairs {
		for _, c := range []struct {
			role   string
			client convClient
		}{{"long-lived", p.long}, {"fresh", p.fresh}} {
			if err := c.client.Err(); err != nil {
				out = append(out, fmt.Sprintf("%s, %s client: stream ended: %v", p.name, c.role, err))
			}
			for _, n := range c.client.Nacks() {
				out = append(out, fmt.Sprintf("%s, %s client: NACK of %s version %q: %s", p.name, c.role, n.TypeURL, n.Version, n.Error))
			}
			waits := unsettled(c.client)
			for _, w := range waits {
				out = append(out, fmt.Sprintf("%s, %s client: %s", p.name, c.role, w))
			}
			if g, ok := c.client.(interface{ Requests() []xdstest.SentRequest }); ok && len(waits) > 0 {
				// Which request went unanswered, and what came before it.
				reqs := g.Requests()
				reqs = reqs[max(0, len(reqs)-maxDiffLines):]
				lines := make([]string, len(reqs))
				for i, r := range reqs {
					lines[i] = "  " + r.String()
				}
				out = append(out, fmt.Sprintf("%s, %s client: its last requests:\n%s", p.name, c.role, strings.Join(lines, "\n")))
			}
		}
		if diff := snapshotDiff(p.long.Active(), p.fresh.Active()); diff != "" {
			out = append(out, fmt.Sprintf("%s: the long-lived client differs from the fresh one:\n%s", p.name, diff))
		}
	}
	return strings.Join(append(out, serverBusy(h)...), "\n")
}

// serverBusy lists what the server still has to do: push plans connections
// have not taken, and responses not yet ACKed or NACKed. A response the
// client answers without either (a SotW response of a type it no longer
// watches, which it re-requests at its previous version) counts as done.
func serverBusy(h *harness) []string {
	var out []string
	for _, c := range h.server.connections() {
		c.queue.mu.Lock()
		pending := c.queue.pending != nil
		c.queue.mu.Unlock()
		if pending {
			out = append(out, fmt.Sprintf("connection %s has a push plan it has not taken", c.id))
		}
	}
	for _, st := range h.server.SyncStatus() {
		for _, ts := range st.Types {
			answered := ts.SentNonce == ts.AckedNonce || (ts.Nack != nil && ts.Nack.Nonce == ts.SentNonce)
			if !answered && (ts.Wildcard || ts.Subscribed > 0) {
				out = append(out, fmt.Sprintf("connection %s: %s nonce %s not ACKed (last ACK %s)",
					st.ConnectionID, ts.Type, ts.SentNonce, ts.AckedNonce))
			}
		}
	}
	return out
}

// describeSteps lists a seed's steps for a failure report.
func describeSteps(initial, steps []convStep) string {
	var b strings.Builder
	b.WriteString("the world the server started with:\n")
	for _, s := range initial {
		fmt.Fprintf(&b, "  %s\n", s)
	}
	b.WriteString("the steps, while the long-lived clients were connected:\n")
	for i, s := range steps {
		fmt.Fprintf(&b, "  %2d. %s\n", i+1, s)
		if s.checkpoint {
			b.WriteString("      -- checkpoint: compared with fresh clients --\n")
		}
	}
	return b.String()
}
