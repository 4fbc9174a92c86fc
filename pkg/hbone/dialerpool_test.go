package hbone

import (
	"context"
	"testing"
	"time"
)

// A pooled connection that has ended leaves the pool, whether it idled out
// or its node went away, even if its key is never dialled again. In-pod
// mode keys the pool by destination pod, so with pods coming and going
// every dead connection kept would pin its buffers for the source
// workload's lifetime.
func TestDialerForgetsEndedConnections(t *testing.T) {
	cases := []struct {
		name string
		// end makes the tunnel's connection end once its stream is closed.
		end func(n *node)
	}{
		{name: "idle timeout", end: func(*node) {}},
		{name: "node closes", end: func(n *node) { n.srv.Close() }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newMesh(t)
			dest := echo(t, "127.0.0.1:0")
			n := oneWorkloadNode(t, m, dest, nodeOpts{})
			dc := &Counters{}
			d, err := NewDialer(DialerConfig{Roots: m.roots, Metrics: dc, IdleTimeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			c, err := d.Dial(context.Background(), &m.a, Target{Node: n.at("127.0.0.2"), Dest: dest, Identity: idB})
			if err != nil {
				t.Fatal(err)
			}
			if got := roundTrip(t, c, "ping"); got != "echo:ping" {
				t.Fatalf("echo = %q", got)
			}
			c.Close()
			tc.end(n)
			eventually(t, "the connection to close", func() bool { return dc.OpenConns[Outbound].Load() == 0 })
			eventually(t, "the pool to forget it", func() bool {
				d.mu.Lock()
				defer d.mu.Unlock()
				return len(d.pool) == 0
			})
		})
	}
}
