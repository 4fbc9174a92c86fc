package hbone

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/internal/fdtest"
)

// Running out of file descriptors passes: the server goes on accepting
// once some are free, rather than leaving its listener open with nobody
// to accept, where every new tunnel would hang until the node proxy is
// restarted.
func TestServeSurvivesRunningOutOfDescriptors(t *testing.T) {
	m := newMesh(t)
	dest := netip.MustParseAddrPort("127.0.0.1:9")
	// The destination is a pipe: no listener of the test's own must run
	// into the limit.
	gate := make(dialGate)
	n := oneWorkloadNode(t, m, dest, nodeOpts{dial: gate.dial})
	d, _ := newDialer(t, m)
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	node := netip.MustParseAddrPort(l.Addr().String())
	served := make(chan error, 1)
	go func() { served <- n.srv.Serve(l) }()

	fdtest.Exhaust(t, func() {
		// The dial takes the last descriptor, so the accept fails.
		c, err := net.Dial("tcp", node.String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		eventually(t, "the accept to fail", func() bool {
			return strings.Contains(n.log.String(), "accept tcp "+node.String()) || len(served) > 0
		})
	})
	select {
	case err := <-served:
		t.Fatalf("Serve gave up when descriptors ran out: %v", err)
	default:
	}
	type dialed struct {
		c   *Conn
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		c, err := d.Dial(context.Background(), &m.a, Target{Node: node, Dest: dest, Identity: idB})
		ch <- dialed{c, err}
	}()
	up := gate.next(t).connect(t)
	r := <-ch
	if r.err != nil {
		t.Fatalf("a tunnel once descriptors are free again: %v", r.err)
	}
	defer r.c.Close()
	go io.WriteString(r.c, "ping")
	readFull(t, up, len("ping"))
}
