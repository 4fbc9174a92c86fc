package hbone

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/testcerts"
	"github.com/meshpilot/meshpilot/internal/testport"
)

// foreignClient is Go's own HTTP/2 client used as a plain CONNECT client, so
// the server is held to the wire format and not to meshpilot's dialer. It
// records the SPIFFE ID of each certificate it was served.
func foreignClient(t *testing.T, cert *tls.Certificate, roots *x509.CertPool, served *[]string) *http.Client {
	t.Helper()
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // SPIFFE certificates name no host; checked below
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := verifyPeer(cs, roots, x509.ExtKeyUsageServerAuth)
			if served != nil {
				*served = append(*served, id)
			}
			return err
		},
	}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP2(true)
	tr := &http.Transport{TLSClientConfig: cfg, Protocols: protocols}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// connect sends a CONNECT for authority through node at nodeAddr, writes
// payload, half-closes, and returns the status and what came back.
func connect(t *testing.T, c *http.Client, method string, nodeAddr netip.AddrPort, authority, payload string) (int, string, error) {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(method, "https://"+nodeAddr.String(), pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = authority
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Do(req.WithContext(ctx))
	if err != nil {
		pw.Close()
		return 0, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		pw.Close()
		return resp.StatusCode, "", nil
	}
	if _, err := io.WriteString(pw, payload); err != nil {
		return resp.StatusCode, "", err
	}
	pw.Close() // END_STREAM: the source's half-close
	got, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(got), err
}

func TestServerForeignClient(t *testing.T) {
	m := newMesh(t)
	dest := echo(t, "127.0.0.1:0")
	n := newNode(t, nodeOpts{
		certs: map[netip.Addr]*tls.Certificate{
			netip.MustParseAddr("127.0.0.2"): &m.b,
			netip.MustParseAddr("127.0.0.3"): &m.c,
		},
		allowed: map[netip.Addr]bool{dest.Addr(): true},
		roots:   m.roots(),
	})
	closedPort := testport.Addr(t)

	cases := []struct {
		name       string
		via        string // node address dialled: picks the certificate
		method     string
		authority  string
		wantStatus int
		wantBody   string
		wantServed string
		wantReason Reason
		wantDial   bool
	}{
		{name: "tunnel to b", via: "127.0.0.2", method: "CONNECT", authority: dest.String(), wantStatus: 200, wantBody: "echo:hello b", wantServed: idB, wantDial: true},
		{name: "tunnel to c", via: "127.0.0.3", method: "CONNECT", authority: dest.String(), wantStatus: 200, wantBody: "echo:hello c", wantServed: idC, wantDial: true},
		{name: "not CONNECT", via: "127.0.0.2", method: "POST", authority: dest.String(), wantStatus: 405, wantServed: idB, wantReason: ReasonMethod},
		{name: "authority not ip", via: "127.0.0.2", method: "CONNECT", authority: "example.com:80", wantStatus: 400, wantServed: idB, wantReason: ReasonAuthority},
		{name: "authority port zero", via: "127.0.0.2", method: "CONNECT", authority: "127.0.0.1:0", wantStatus: 400, wantServed: idB, wantReason: ReasonAuthority},
		{name: "not a local workload", via: "127.0.0.2", method: "CONNECT", authority: "10.9.9.9:80", wantStatus: 403, wantServed: idB, wantReason: ReasonPolicy},
		{name: "destination down", via: "127.0.0.2", method: "CONNECT", authority: closedPort, wantStatus: 503, wantServed: idB, wantReason: ReasonDial, wantDial: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var served []string
			c := foreignClient(t, &m.a, m.roots(), &served)
			dialsBefore := n.dials.Load()
			refusedBefore := n.counters.Refusals(Inbound, tc.wantReason)
			payload := "hello " + strings.TrimPrefix(tc.name, "tunnel to ")
			status, body, err := connect(t, c, tc.method, n.at(tc.via), tc.authority, payload)
			if err != nil {
				t.Fatalf("request: %v", err)
			}
			if status != tc.wantStatus || body != tc.wantBody {
				t.Errorf("got %d %q, want %d %q", status, body, tc.wantStatus, tc.wantBody)
			}
			if len(served) != 1 || served[0] != tc.wantServed {
				t.Errorf("served certificates %v, want the one of %s", served, tc.wantServed)
			}
			if dialled := n.dials.Load() > dialsBefore; dialled != tc.wantDial {
				t.Errorf("dialled = %v, want %v", dialled, tc.wantDial)
			}
			if tc.wantReason != "" && n.counters.Refusals(Inbound, tc.wantReason) != refusedBefore+1 {
				t.Errorf("refusals for %q did not go up by one", tc.wantReason)
			}
		})
	}
	// The node logs who sent each tunnel.
	if log := n.log.String(); !strings.Contains(log, "peer="+idA) || !strings.Contains(log, "hbone tunnel closed") {
		t.Errorf("log does not name the peer of the tunnel:\n%s", log)
	}
	if got := n.counters.Sent[Inbound].Load(); got != int64(len("hello b")+len("hello c")) {
		t.Errorf("bytes sent toward destinations = %d", got)
	}
}

// A client that cannot prove a mesh identity gets no HTTP/2 at all.
func TestServerRefusesHandshake(t *testing.T) {
	m := newMesh(t)
	other := testcerts.NewCA(t, "cluster.local") // same trust domain name, another root
	dest := echo(t, "127.0.0.1:0")
	n := newNode(t, nodeOpts{
		certs:   map[netip.Addr]*tls.Certificate{netip.MustParseAddr("127.0.0.2"): &m.b},
		allowed: map[netip.Addr]bool{dest.Addr(): true},
		roots:   m.roots(),
	})
	foreignRoot := other.Issue(t, idA)
	noSpiffe := m.ca.Issue(t, "")

	cases := []struct {
		name  string
		cert  *tls.Certificate
		alpn  []string
		refer string // what the server's log says
	}{
		{name: "no client certificate", cert: nil, alpn: []string{"h2"}, refer: "certificate"},
		{name: "certificate from another root", cert: &foreignRoot, alpn: []string{"h2"}, refer: "unknown authority"},
		{name: "certificate without SPIFFE ID", cert: &noSpiffe, alpn: []string{"h2"}, refer: "no SPIFFE ID"},
		{name: "no h2", cert: &m.a, alpn: []string{"http/1.1"}, refer: "h2"},
		{name: "no ALPN", cert: &m.a, alpn: nil, refer: "h2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			refusesHandshake(t, n, tc.cert, tc.alpn, tc.refer)
		})
	}
	// The foreign HTTP/2 client with a foreign certificate fails too.
	c := foreignClient(t, &foreignRoot, m.roots(), nil)
	if _, _, err := connect(t, c, "CONNECT", n.at("127.0.0.2"), dest.String(), "x"); err == nil {
		t.Errorf("a client from another root got a tunnel")
	}
	if n.dials.Load() != 0 {
		t.Errorf("a refused client made the node dial")
	}
}

// refusesHandshake checks that n refuses a TLS client with cert (nil for
// none) offering alpn, counts the refusal, opens no HTTP/2 connection and
// logs why, in words containing refer.
func refusesHandshake(t *testing.T, n *node, cert *tls.Certificate, alpn []string, refer string) {
	t.Helper()
	before := n.counters.Refusals(Inbound, ReasonHandshake)
	cfg := &tls.Config{InsecureSkipVerify: true, NextProtos: alpn}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := tls.Dial("tcp", n.at("127.0.0.2").String(), cfg)
	if err == nil {
		// In TLS 1.3 the server judges the client's certificate
		// after the client's handshake returns: the refusal
		// arrives as an alert, or a close, on the first read.
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil {
		t.Fatal("handshake accepted")
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("server neither refused nor closed: %v", err)
	}
	eventually(t, "the refusal to be counted", func() bool {
		return n.counters.Refusals(Inbound, ReasonHandshake) == before+1
	})
	if n.counters.Conns[Inbound].Load() != 0 {
		t.Errorf("an HTTP/2 connection was opened")
	}
	// The refusal is counted before it is logged.
	if !waitUntil(5*time.Second, func() bool { return strings.Contains(n.log.String(), refer) }) {
		t.Errorf("log does not say why (%q):\n%s", refer, n.log.String())
	}
}
