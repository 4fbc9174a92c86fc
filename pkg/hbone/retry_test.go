package hbone

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// A CONNECT that the server ended without processing it (RFC 9113 §8.7:
// RST_STREAM REFUSED_STREAM, or a GOAWAY whose last stream ID is below the
// stream's) is sent again on another connection, twice at most. One the
// server may have acted on, say by dialling the destination, is not. The
// caller can write only once Dial has returned, so a CONNECT sent again
// has carried no data: the destination gets every byte exactly once.
func TestDialerRetriesUnprocessedConnect(t *testing.T) {
	rst := func(code http2.ErrCode) func(*http2.Framer, uint32) bool {
		return func(fr *http2.Framer, id uint32) bool { fr.WriteRSTStream(id, code); return true }
	}
	// goAway sends GOAWAY with last as its last stream ID, and keeps the
	// connection open or closes it.
	goAway := func(last func(id uint32) uint32, keep bool) func(*http2.Framer, uint32) bool {
		return func(fr *http2.Framer, id uint32) bool { fr.WriteGoAway(last(id), http2.ErrCodeNo, nil); return keep }
	}
	below := func(uint32) uint32 { return 0 } // the first stream: no stream processed
	covering := func(id uint32) uint32 { return id }
	cases := []struct {
		name string
		// refuse answers the first stream of each of the first refusals
		// connections, and reports whether to keep the connection open;
		// the node serves the later ones.
		refuse    func(fr *http2.Framer, id uint32) bool
		refusals  int
		wantConns int64 // connections Dial opened
		wantErr   bool
	}{
		{name: "REFUSED_STREAM", refuse: rst(http2.ErrCodeRefusedStream), refusals: 1, wantConns: 2},
		{name: "GOAWAY below the stream", refuse: goAway(below, true), refusals: 1, wantConns: 2},
		{name: "GOAWAY below the stream, then close", refuse: goAway(below, false), refusals: 1, wantConns: 2},
		{name: "refused every time", refuse: rst(http2.ErrCodeRefusedStream), refusals: 10, wantConns: 1 + maxRetries, wantErr: true},
		// The server may have acted on these streams. Go's own
		// Transport would retry PROTOCOL_ERROR (golang/go#47635).
		{name: "CANCEL", refuse: rst(http2.ErrCodeCancel), refusals: 1, wantConns: 1, wantErr: true},
		{name: "PROTOCOL_ERROR", refuse: rst(http2.ErrCodeProtocol), refusals: 1, wantConns: 1, wantErr: true},
		{name: "GOAWAY covering the stream, then close", refuse: goAway(covering, false), refusals: 1, wantConns: 1, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newMesh(t)
			dest := echo(t, "127.0.0.1:0")
			n := oneWorkloadNode(t, m, dest, nodeOpts{})
			r := newRefuser(t, m, n, tc.refusals, tc.refuse)
			d, dc := newDialer(t, m)

			c, err := d.Dial(context.Background(), &m.a, Target{Node: r.addr, Dest: dest, Identity: idB})
			if got := r.conns.Load(); got != tc.wantConns {
				t.Errorf("Dial opened %d connections, want %d", got, tc.wantConns)
			}
			if tc.wantErr {
				if err == nil {
					t.Fatal("Dial succeeded")
				}
				if got := dc.Refusals(Outbound, ReasonTransport); got != 1 {
					t.Errorf("%d refusals counted, want 1", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := roundTrip(t, c, "hello"); got != "echo:hello" {
				t.Errorf("echo = %q, want %q", got, "echo:hello")
			}
			c.Close()
			if got := r.data.Load(); got != 0 {
				t.Errorf("the refused stream carried %d bytes", got)
			}
			if got := n.dials.Load(); got != 1 {
				t.Errorf("the node dialled %d times, want 1", got)
			}
		})
	}
}

// refuser is a node's address whose first connections answer their first
// stream as the test says, while later ones reach the node.
type refuser struct {
	addr  netip.AddrPort
	conns atomic.Int64 // accepted
	data  atomic.Int64 // DATA bytes received on refusing connections
}

func newRefuser(t *testing.T, m *mesh, n *node, refusals int, refuse func(*http2.Framer, uint32) bool) *refuser {
	t.Helper()
	// 127.0.0.2 is b's address to the node, which picks the certificate
	// by address, on whatever port.
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	r := &refuser{addr: netip.MustParseAddrPort(l.Addr().String())}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if r.conns.Add(1) > int64(refusals) {
				go n.srv.ServeConn(c)
				continue
			}
			go r.serve(c, &m.b, refuse)
		}
	}()
	return r
}

// serve speaks HTTP/2 as a server just enough to refuse c's first stream,
// then reads to the end.
func (r *refuser) serve(c net.Conn, cert *tls.Certificate, refuse func(*http2.Framer, uint32) bool) {
	defer c.Close()
	tc := tls.Server(c, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{*cert}, NextProtos: []string{ALPN}})
	if _, err := io.ReadFull(tc, make([]byte, len(http2.ClientPreface))); err != nil {
		return
	}
	fr := http2.NewFramer(tc, tc)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if fr.WriteSettings() != nil {
		return
	}
	refused := false
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if !refused {
				refused = true
				if !refuse(fr, f.StreamID) {
					return
				}
			}
		case *http2.DataFrame:
			r.data.Add(int64(len(f.Data())))
		}
	}
}

// unprocessed tells the errors by what they are, however they are wrapped,
// and takes nothing else for them.
func TestUnprocessedErrors(t *testing.T) {
	goAway := errors.New(goAwayUnprocessed)
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"GOAWAY", goAway, true},
		{"GOAWAY wrapped", fmt.Errorf("connect: %w", goAway), true},
		{"GOAWAY in a url.Error", &url.Error{Op: "Post", URL: "http://10.0.0.1:15008", Err: goAway}, true},
		{"refused stream", http2.StreamError{StreamID: 1, Code: http2.ErrCodeRefusedStream}, true},
		{"refused stream wrapped", fmt.Errorf("connect: %w", http2.StreamError{StreamID: 1, Code: http2.ErrCodeRefusedStream}), true},
		{"stream reset otherwise", http2.StreamError{StreamID: 1, Code: http2.ErrCodeCancel}, false},
		{"a text that only mentions it", errors.New("dial: " + goAwayUnprocessed + " (twice)"), false},
		{"connection lost", io.ErrUnexpectedEOF, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := unprocessed(tt.err); got != tt.want {
				t.Errorf("unprocessed(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
