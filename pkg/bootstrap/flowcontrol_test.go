package bootstrap

import (
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestXDSServerAdvertisesFixedWindows reads what the xDS server tells a new
// HTTP/2 connection: a client may send 1 MiB on each stream and on the
// connection before it hears back, so a sidecar's EDS request or ACK
// (225 KB at 5,000 Services) crosses in one go rather than in rounds of
// WINDOW_UPDATEs. Both the plaintext and the TLS xDS servers are built by
// newXDSGRPCServer.
func TestXDSServerAdvertisesFixedWindows(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newXDSGRPCServer(0, 0)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	conn, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}

	// The server opens with its settings and, if the connection's window
	// is larger than HTTP/2's initial one, an update of it; its
	// acknowledgement of our settings comes after both.
	const want = 1 << 20
	var streamWindow, connWindow uint32 = 65535, 65535
	for acked := false; !acked; {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's opening frames: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				acked = true
			} else if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
				streamWindow = v
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				connWindow += f.Increment
			}
		}
	}
	if streamWindow != want || connWindow != want {
		t.Errorf("windows: stream %d, connection %d bytes; want %d for both", streamWindow, connWindow, want)
	}
}
