package hbone

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// Bytes the node has received but will never pass on still count against
// the connection's window until the node gives them back. Were they lost,
// the window would shrink with every such stream, and after 16 MiB no
// stream on the connection could send at all. Each case strands a stream's
// data in the node, queued or in a write to the destination, and ends the
// stream, until more than the connection's whole window has been stranded;
// the source waits for window as a client must, so a leak stalls it.
func TestStrandedDataReturnsConnectionWindow(t *testing.T) {
	m := newMesh(t)
	dest := netip.MustParseAddrPort("127.0.0.1:9") // the dial gate answers
	cases := []struct {
		name string
		// dialFails refuses the stream once its data has arrived.
		dialFails bool
		// writing strands the data in a write to the destination, which
		// has read a byte of it, rather than queued behind the first
		// frame's write.
		writing bool
		// end ends stream id once its data is stranded in the node; up is
		// the destination's end of its connection (nil if dialFails).
		end func(c *rawClient, id uint32, up net.Conn)
	}{
		{name: "source resets, data queued", end: sourceResets},
		{name: "source resets, data being written", writing: true, end: sourceResets},
		{name: "destination fails, data queued", end: destinationFails},
		{name: "destination fails, data being written", writing: true, end: destinationFails},
		{name: "dial fails", dialFails: true, end: func(c *rawClient, id uint32, _ net.Conn) {
			c.until(http2.FrameRSTStream, id)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gate := make(dialGate)
			n := oneWorkloadNode(t, m, dest, nodeOpts{dial: gate.dial})
			c := dialRaw(t, m, n.at("127.0.0.2"))
			frame := make([]byte, 16<<10)
			const frames = 60 // 960 KiB, within the stream's window
			for id, stranded := uint32(1), 0; stranded <= connWindow; id += 2 {
				c.connect(id, dest)
				p := gate.next(t)
				var up net.Conn
				if !tc.dialFails {
					up = p.connect(t)
					c.until(http2.FrameHeaders, id)
				}
				c.send(id, frame)
				if up != nil {
					// The node is writing the first frame alone, so
					// the next ones queue behind it.
					readFull(t, up, 1)
				}
				for range frames - 1 {
					c.send(id, frame)
				}
				c.sync()
				if tc.writing {
					// The first frame's last bytes, and one of the
					// next write, which holds all the queued frames.
					readFull(t, up, len(frame))
				}
				if tc.dialFails {
					p.fail()
				}
				tc.end(c, id, up)
				stranded += frames * len(frame)
			}
		})
	}
}

func sourceResets(c *rawClient, id uint32, _ net.Conn) {
	if err := c.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
		c.t.Fatal(err)
	}
}

func destinationFails(c *rawClient, id uint32, up net.Conn) {
	up.Close()
	c.until(http2.FrameRSTStream, id)
}

func readFull(t *testing.T, c net.Conn, n int) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, n)); err != nil {
		t.Fatalf("the destination read: %v", err)
	}
}

// What the node holds for a stream is bounded by the bytes queued in it,
// which the stream's window bounds, whatever size the source's frames
// are: 1-byte frames must not each pin a buffer of 1 KiB or more.
func TestQueuedDataHoldsAboutItsSize(t *testing.T) {
	m := newMesh(t)
	dest := netip.MustParseAddrPort("127.0.0.1:9")
	for _, size := range []int{1, 100, 1000, 1025, 8193, 16 << 10} {
		t.Run(fmt.Sprintf("%d-byte frames", size), func(t *testing.T) {
			tun := openTunnel(t, m, dest)
			n, c, up := tun.n, tun.c, tun.up
			// The node is stuck writing this frame's second byte, so
			// the next frames stay queued.
			c.send(1, []byte("ab"))
			readFull(t, up, 1)
			frames := min(256, (512<<10)/size) // within the stream's window
			for range frames {
				c.send(1, make([]byte, size))
			}
			c.sync()

			hc := n.onlyConn(t)
			hc.mu.Lock()
			queued, held := 0, 0
			for _, b := range hc.streams[1].in {
				queued += len(b)
				held += cap(b)
			}
			hc.mu.Unlock()
			if queued != frames*size {
				t.Fatalf("%d bytes queued, want %d", queued, frames*size)
			}
			// At most the last chunk is partly empty.
			if spare := held - queued; spare > bufSizes[1] {
				t.Errorf("%d bytes queued hold %d bytes of buffers", queued, held)
			}
		})
	}
}
