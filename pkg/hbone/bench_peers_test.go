package hbone

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/meshpilot/meshpilot/pkg/netns"
)

// Minimal HTTP/2 peers written on x/net's Framer, for measuring one proxy
// end at a time: each keeps no per-stream state, so the memory a benchmark
// sees is the other end's alone.

// bareClient opens n CONNECT streams to dest on one TLS connection to the
// node and returns once all are answered 200. It holds the connection, not
// the streams; close it when done.
func (tp *topology) bareClient(b *testing.B, dest netip.AddrPort, n int) net.Conn {
	b.Helper()
	raw := tp.plain(b, tp.node)
	c := tls.Client(raw, &tls.Config{
		MinVersion:         tls.VersionTLS13,
		NextProtos:         []string{ALPN},
		Certificates:       []tls.Certificate{tp.m.a},
		InsecureSkipVerify: true, // the server is ours; only its memory is measured
	})
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		b.Fatal(err)
	}
	if err := fr.WriteSettings(); err != nil {
		b.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for i := range n {
		hb.Reset()
		enc.WriteField(hpack.HeaderField{Name: ":method", Value: "CONNECT"})
		enc.WriteField(hpack.HeaderField{Name: ":authority", Value: dest.String()})
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
			b.Fatal(err)
		}
	}
	for answered := 0; answered < n; {
		f, err := fr.ReadFrame()
		if err != nil {
			b.Fatal(err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.PseudoValue("status") != "200" {
				b.Fatalf("stream %d answered %s", f.StreamID, f.PseudoValue("status"))
			}
			answered++
		case *http2.RSTStreamFrame, *http2.GoAwayFrame:
			b.Fatalf("server ended a stream: %v", f)
		}
	}
	return c
}

// bareServer answers every CONNECT 200 and keeps nothing per stream. It
// listens in namespace b and returns its address.
func (tp *topology) bareServer(b *testing.B) netip.AddrPort {
	b.Helper()
	l, err := netns.Listen(tp.b.Path, netip.AddrPortFrom(tp.b.IP, 0), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{ALPN}, Certificates: []tls.Certificate{tp.m.b}}
	go func() {
		for {
			raw, err := l.Accept()
			if err != nil {
				return
			}
			go bareServe(tls.Server(raw, cfg))
		}
	}()
	return netip.MustParseAddrPort(l.Addr().String())
}

func bareServe(c net.Conn) {
	defer c.Close()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	// The same stream limit as Server, so the dialer pools alike.
	fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 100})
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
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
			hb.Reset()
			enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: hb.Bytes(), EndHeaders: true})
		}
	}
}

// idleClientStreams opens n tunnels with the Dialer through node.
func (tp *topology) idleClientStreams(b *testing.B, d *Dialer, node netip.AddrPort, n int) []*Conn {
	b.Helper()
	conns := make([]*Conn, 0, n)
	for range n {
		c, err := d.Dial(context.Background(), &tp.m.a, Target{Node: node, Dest: tp.holder, Identity: idB})
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	return conns
}
