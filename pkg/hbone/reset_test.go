package hbone

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// A stream reset before the node dials its destination is never dialled,
// and one reset while the node dials abandons the dial. Otherwise HEADERS
// each followed at once by RST_STREAM ("rapid reset", CVE-2023-44487)
// would have the node open destination connections that nobody uses.
func TestResetStreamIsNotDialled(t *testing.T) {
	m := newMesh(t)
	dest := netip.MustParseAddrPort("127.0.0.1:9")
	streamError := func(c *rawClient) error {
		c.fr.AllowIllegalWrites = true
		return c.fr.WriteWindowUpdate(1, 0) // RFC 9113 §6.9
	}
	sourceResets := func(c *rawClient) error { return c.fr.WriteRSTStream(1, http2.ErrCodeCancel) }
	cases := []struct {
		name string
		// dialling resets the stream while the node dials, rather than
		// while it authorizes the stream.
		dialling bool
		reset    func(c *rawClient) error
	}{
		{name: "source resets before the dial", reset: sourceResets},
		{name: "source resets during the dial", dialling: true, reset: sourceResets},
		{name: "stream error before the dial", reset: streamError},
		{name: "stream error during the dial", dialling: true, reset: streamError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			authorizing, release := make(chan struct{}, 1), make(chan struct{})
			gate := make(dialGate, 1)
			n := oneWorkloadNode(t, m, dest, nodeOpts{
				dial: gate.dial,
				// Like the node proxy's, it ignores its context, so
				// it can still be running when the stream is reset.
				authorize: func(context.Context, StreamInfo) error {
					authorizing <- struct{}{}
					if !tc.dialling {
						<-release
					}
					return nil
				},
			})
			free := sync.OnceFunc(func() { close(release) })
			t.Cleanup(free) // before the node's, which waits for Authorize
			c := dialRaw(t, m, n.at("127.0.0.2"))
			c.connect(1, dest)
			select {
			case <-authorizing:
			case <-time.After(5 * time.Second):
				t.Fatal("the stream was not authorized")
			}
			var p *pendingDial
			if tc.dialling {
				p = gate.next(t)
			}
			if err := tc.reset(c); err != nil {
				t.Fatal(err)
			}
			c.sync()
			free()
			if p != nil {
				select {
				case <-p.ctx.Done():
				case <-time.After(5 * time.Second):
					t.Fatal("the dial went on after the stream was reset")
				}
			}
			hc := n.onlyConn(t)
			eventually(t, "the stream to end, or a dial", func() bool {
				hc.mu.Lock()
				defer hc.mu.Unlock()
				return len(hc.streams) == 0 || (!tc.dialling && n.dials.Load() > 0)
			})
			want := int64(0)
			if tc.dialling {
				want = 1 // the one abandoned
			}
			if got := n.dials.Load(); got != want {
				t.Errorf("%d dials, want %d", got, want)
			}
			if got := n.counters.Refusals(Inbound, ReasonDial); got != 0 {
				t.Errorf("%d dials refused, want none: the stream was reset", got)
			}
		})
	}
}
