package hbone

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/netip"
	"testing"

	"github.com/meshpilot/meshpilot/pkg/netns"
)

// Reference points for BenchmarkThroughput. A tunnel through a node proxy
// crosses two TCP connections (source to proxy over the veth, proxy to
// destination) and encrypts and decrypts every byte; plain TCP does one
// connection and no cryptography. These relays pay exactly those costs and
// nothing of HTTP/2, so they bound what any HBONE implementation on this
// machine can reach:
//   - tcp-relay: a bare TCP proxy in namespace b (io.Copy, which splices);
//   - tls-relay: TLS 1.3 with the mesh certificates, then a 256 KiB copy.

// relay listens in namespace b and forwards each connection to the sink,
// passing each side's end of input on as a half-close. wrap, when non-nil,
// turns the accepted connection into what is read and written.
func (tp *topology) relay(b *testing.B, wrap func(net.Conn) net.Conn) netip.AddrPort {
	b.Helper()
	l, err := netns.Listen(tp.b.Path, netip.AddrPortFrom(tp.b.IP, 0), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if wrap != nil {
					c = wrap(c)
				}
				up, err := netns.Dial(context.Background(), tp.b.Path, tp.sink, nil)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{})
				go func() {
					copyBoth(up, c, wrap != nil)
					up.(*net.TCPConn).CloseWrite()
					close(done)
				}()
				copyBoth(c, up, wrap != nil)
				<-done
			}()
		}
	}()
	return netip.MustParseAddrPort(l.Addr().String())
}

// copyBoth copies with io.Copy (splice between TCP sockets) or, when
// buffered, through a 256 KiB buffer as a user-space proxy must for TLS.
func copyBoth(dst, src net.Conn, buffered bool) {
	if !buffered {
		io.Copy(dst, src)
		return
	}
	buf := make([]byte, 256<<10)
	io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf)
}

func (tp *topology) tcpRelay(b *testing.B) netip.AddrPort { return tp.relay(b, nil) }

func (tp *topology) tlsRelay(b *testing.B) netip.AddrPort {
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{tp.m.b},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    tp.m.roots(),
	}
	return tp.relay(b, func(c net.Conn) net.Conn { return tls.Server(c, cfg) })
}

// tlsClient dials the TLS relay from namespace a.
func (tp *topology) tlsClient(b *testing.B, relay netip.AddrPort) halfCloser {
	b.Helper()
	raw := tp.plain(b, relay)
	c := tls.Client(raw, &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{tp.m.a},
		RootCAs:      tp.m.roots(),
		// The relay's certificate names a workload, not a host.
		InsecureSkipVerify: true,
	})
	if err := c.Handshake(); err != nil {
		b.Fatal(err)
	}
	return c
}
