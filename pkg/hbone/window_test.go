package hbone

import (
	"net/netip"
	"testing"

	"golang.org/x/net/http2"
)

// A source may send only what the node has granted it: the initial windows
// plus the WINDOW_UPDATEs the node has sent. Bytes the node has passed on
// but not yet acknowledged (it batches its updates) give the source no
// room, so a frame past the granted window must be refused even then
// (RFC 9113 §6.9.1): a stream error on a stream's window, a connection
// error on the connection's.
func TestDataBeyondTheGrantedWindow(t *testing.T) {
	const frameLen = 16 << 10
	frame := make([]byte, frameLen)
	cases := []struct {
		name string
		// fill sends, after stream 1's first frame has been passed on,
		// exactly what the granted window still allows, and returns the
		// stream to send the overshooting frame on.
		fill  func(t *testing.T, tun tunnel) uint32
		check func(c *rawClient)
	}{
		{
			name: "stream window",
			fill: func(t *testing.T, tun tunnel) uint32 {
				for range streamWindow/frameLen - 1 {
					tun.c.send(1, frame)
				}
				return 1
			},
			check: func(c *rawClient) {
				if rst := c.until(http2.FrameRSTStream, 1).(*http2.RSTStreamFrame); rst.ErrCode != http2.ErrCodeFlowControl {
					c.t.Errorf("RST_STREAM %v, want FLOW_CONTROL_ERROR", rst.ErrCode)
				}
			},
		},
		{
			name: "connection window",
			fill: func(t *testing.T, tun tunnel) uint32 {
				for range streamWindow/frameLen - 1 {
					tun.c.send(1, frame)
				}
				id := uint32(3)
				for ; id < 3+2*(connWindow/streamWindow-1); id += 2 {
					tun.connect(t, id)
					for range streamWindow / frameLen {
						tun.c.send(id, frame)
					}
				}
				// A stream with room of its own: only the connection's
				// window is exceeded.
				tun.connect(t, id)
				if tun.c.connWin != 0 {
					t.Fatalf("%d bytes of connection window left, want 0", tun.c.connWin)
				}
				return id
			},
			check: func(c *rawClient) { c.goneAway(http2.ErrCodeFlowControl) },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newMesh(t)
			dest := netip.MustParseAddrPort("127.0.0.1:9")
			tun := openTunnel(t, m, dest)
			tun.c.send(1, frame)
			readFull(t, tun.up, frameLen)
			hc := tun.n.onlyConn(t)
			// Passed on, and below both thresholds for an update.
			eventually(t, "the first frame's bytes to count as passed on", func() bool {
				hc.mu.Lock()
				defer hc.mu.Unlock()
				return hc.unacked == frameLen
			})
			id := tc.fill(t, tun)
			tun.c.sync()
			if err := tun.c.fr.WriteData(id, false, frame); err != nil {
				t.Fatal(err)
			}
			tc.check(tun.c)
		})
	}
}

// connect opens stream id to the tunnel's destination through the gate,
// leaving its destination unread.
func (tun tunnel) connect(t *testing.T, id uint32) {
	t.Helper()
	tun.c.connect(id, netip.MustParseAddrPort("127.0.0.1:9"))
	tun.gate.next(t).connect(t)
	tun.c.until(http2.FrameHeaders, id)
}
