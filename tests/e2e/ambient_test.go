package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/meshpilot/meshpilot/internal/testcerts"
	"github.com/meshpilot/meshpilot/internal/testlog"
	"github.com/meshpilot/meshpilot/pkg/caclient"
	"github.com/meshpilot/meshpilot/pkg/capture"
	"github.com/meshpilot/meshpilot/pkg/netns"
	"github.com/meshpilot/meshpilot/pkg/nodeproxy"
)

// TestAmbientHBONE carries real TCP between network namespaces through two
// node proxies that meshpilot serves: pod A (node-1) reaches pod B (node-2)
// over HBONE, by its Pod IP and by its Service's VIP; D is A's neighbour on
// node-1; C, on node-2, is outside the mesh. The Pods, Services and
// ServiceAccounts are objects in the test API server, with the
// namespaces' IPs.
func TestAmbientHBONE(t *testing.T) {
	fabric, pods := podNetwork(t, 4)
	a, b, c, d := pods[0], pods[1], pods[2], pods[3]
	m := newKubeMesh(t)
	cp := startControlPlane(t, m)

	m.apply(t, "ambient-world", ambientWorldYAML())
	for name, ip := range map[string]netip.Addr{"a": a.ip, "b": b.ip, "d": d.ip} {
		setPodIP(t, m, "ambient-demo", name, ip)
	}
	setPodIP(t, m, "plain", "c", c.ip)
	for _, n := range []string{"ztunnel-node-1", "ztunnel-node-2"} {
		setPodIP(t, m, "istio-system", n, netip.MustParseAddr("127.0.0.1"))
	}

	// The applications: an echo server in each pod, on 8080.
	servers := map[string]*tcpEcho{}
	for name, p := range map[string]podNet{"a": a, "b": b, "c": c, "d": d} {
		servers[name] = startEcho(t, p)
	}
	// The capture the CNI agent will install; here the test does.
	for _, p := range []podNet{a, b, d} {
		if err := capture.NFTables.Install(p.path, capture.Ports{Outbound: nodeproxy.OutboundPort,
			Inbound: nodeproxy.InboundPlaintextPort, HBONE: nodeproxy.HBONEPort, Mark: nodeproxy.SocketMark}); err != nil {
			t.Fatal(err)
		}
	}

	netnsOf := map[string]string{"ambient-demo/a": a.path, "ambient-demo/b": b.path, "ambient-demo/d": d.path, "plain/c": c.path}
	node1Logs, node2Logs := &testlog.Buffer{}, &testlog.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node-1's log:\n%s\nnode-2's log:\n%s", node1Logs.String(), node2Logs.String())
		}
	})
	startNodeProxy(t, m, cp, "node-1", netnsOf, node1Logs)
	startNodeProxy(t, m, cp, "node-2", netnsOf, node2Logs)

	// Both proxies serve their workloads once A reaches B and D.
	waitFor(t, 30*time.Second, "A reaches B over HBONE", func() error { return echoOnce(a, netip.AddrPortFrom(b.ip, 8080), "warm-up") })
	waitFor(t, 30*time.Second, "A reaches D over HBONE", func() error { return echoOnce(a, netip.AddrPortFrom(d.ip, 8080), "warm-up") })

	t.Run("bytes and half-close through the tunnel", func(t *testing.T) {
		payload := strings.Repeat("hbone ", 100_000) // 600 kB, several HTTP/2 frames
		if err := echoOnce(a, netip.AddrPortFrom(b.ip, 8080), payload); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a Service VIP resolves to its workload", func(t *testing.T) {
		if err := echoOnce(a, netip.MustParseAddrPort("10.0.0.77:80"), "via the service"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("node-2 saw A's identity", func(t *testing.T) {
		want := `peer=spiffe://cluster.local/ns/ambient-demo/sa/a`
		if !strings.Contains(node2Logs.String(), want) {
			t.Errorf("node-2's log has no tunnel from %s:\n%s", want, node2Logs.String())
		}
	})
	t.Run("a client outside the mesh reaches B in plaintext through its capture", func(t *testing.T) {
		if err := echoOnce(fabric, netip.AddrPortFrom(b.ip, 8080), "plaintext in"); err != nil {
			t.Fatal(err)
		}
		// The node proxy dials B from inside B's namespace; a connection
		// that bypassed it would come from the client's address.
		if got := servers["b"].lastPeer(); got == fabric.ip {
			t.Errorf("B saw the client (%s) itself: the connection bypassed the node proxy", got)
		}
	})
	t.Run("a destination outside the mesh is passed through", func(t *testing.T) {
		if err := echoOnce(a, netip.AddrPortFrom(c.ip, 8080), "plain TCP"); err != nil {
			t.Fatal(err)
		}
		if got := servers["c"].lastPeer(); got != a.ip {
			t.Errorf("C saw the connection from %s, want A (%s) itself: it was not passed through", got, a.ip)
		}
	})

	t.Run("a selector-less Service reaches its endpoint outside the cluster", func(t *testing.T) {
		// The fabric stands for a host outside the cluster; only the
		// EndpointSlice, written by hand, names it.
		outside := startEcho(t, fabric)
		m.apply(t, "external-endpoint", externalServiceYAML(fabric.ip))
		waitFor(t, 30*time.Second, "A reaches the outside host by the Service's VIP", func() error {
			return echoOnce(a, netip.MustParseAddrPort("10.0.0.78:80"), "to the outside")
		})
		// Node-1's proxy dials it from inside A's namespace, in plain TCP.
		if got := outside.lastPeer(); got != a.ip {
			t.Errorf("the outside host saw %s, want A (%s)", got, a.ip)
		}
	})

	// A foreign HBONE client: Go's own HTTP/2 client with a certificate
	// from meshpilot's CA, dialling B's :15008 from outside the pods.
	tester := meshCertificate(t, m, cp, "ambient-demo", "tester")
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(tester.RootPEM)
	dialB := func(cert *tls.Certificate) (*tls.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		raw, err := netns.Dial(ctx, fabric.path, netip.AddrPortFrom(b.ip, nodeproxy.HBONEPort), nil)
		if err != nil {
			return nil, err
		}
		cfg := &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS13,
			// The server is known by its SPIFFE identity, not a DNS name.
			InsecureSkipVerify: true, VerifyConnection: verifyChain(roots)}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		conn := tls.Client(raw, cfg)
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return conn, nil
	}
	t.Run("the server certificate is B's, not the node's", func(t *testing.T) {
		conn, err := dialB(&tester.TLS)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		state := conn.ConnectionState()
		if got := state.PeerCertificates[0].URIs; len(got) != 1 || got[0].String() != "spiffe://cluster.local/ns/ambient-demo/sa/b" {
			t.Errorf("served certificate names %v, want B's identity", got)
		}
		if state.Version != tls.VersionTLS13 || state.NegotiatedProtocol != "h2" {
			t.Errorf("TLS version %x, ALPN %q; want TLS 1.3 and h2", state.Version, state.NegotiatedProtocol)
		}
	})
	connect := func(t *testing.T, authority string) (*http.Response, io.WriteCloser, func()) {
		t.Helper()
		conn, err := dialB(&tester.TLS)
		if err != nil {
			t.Fatal(err)
		}
		// net/http speaks HTTP/2 on the connection dialled above, as the
		// TLS handshake negotiated it.
		protocols := new(http.Protocols)
		protocols.SetHTTP2(true)
		tr := &http.Transport{Protocols: protocols,
			DialTLSContext: func(context.Context, string, string) (net.Conn, error) { return conn, nil }}
		cc, err := tr.NewClientConn(context.Background(), "https", conn.RemoteAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		pr, pw := io.Pipe()
		req, _ := http.NewRequest(http.MethodConnect, "https://"+authority, pr)
		req.Host = authority
		resp, err := cc.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp, pw, func() { pw.Close(); resp.Body.Close(); conn.Close() }
	}
	t.Run("a foreign HTTP/2 CONNECT client reaches B", func(t *testing.T) {
		resp, body, done := connect(t, netip.AddrPortFrom(b.ip, 8080).String())
		defer done()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %s", resp.Status)
		}
		if _, err := io.WriteString(body, "from net/http"); err != nil {
			t.Fatal(err)
		}
		body.Close() // half-close: the echo answers and ends
		got, err := io.ReadAll(resp.Body)
		if err != nil || string(got) != "from net/http" {
			t.Errorf("echo %q, %v", got, err)
		}
	})
	t.Run("a CONNECT to an address B does not own is refused", func(t *testing.T) {
		for _, target := range []netip.Addr{c.ip, d.ip} {
			resp, _, done := connect(t, netip.AddrPortFrom(target, 8080).String())
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("CONNECT %s through B: %s, want 403", target, resp.Status)
			}
			done()
		}
	})
	t.Run("a client without a mesh certificate is refused at the handshake", func(t *testing.T) {
		foreign := testcerts.NewCA(t, "cluster.local").Issue(t, "spiffe://cluster.local/ns/ambient-demo/sa/tester")
		for name, cert := range map[string]*tls.Certificate{"no certificate": nil, "a certificate from another root": &foreign} {
			conn, err := dialB(cert)
			if err == nil {
				// Under TLS 1.3 the client learns of the server's refusal
				// on its first read.
				_, err = conn.Read(make([]byte, 1))
				conn.Close()
			}
			if err == nil || !strings.Contains(err.Error(), "tls: ") {
				t.Errorf("%s: %v, want the TLS handshake refused", name, err)
			}
		}
	})

	t.Run("deleting B's Pod ends its tunnels and no others", func(t *testing.T) {
		toB, err := openEcho(a, netip.AddrPortFrom(b.ip, 8080))
		if err != nil {
			t.Fatal(err)
		}
		defer toB.Close()
		toD, err := openEcho(a, netip.AddrPortFrom(d.ip, 8080))
		if err != nil {
			t.Fatal(err)
		}
		defer toD.Close()
		for _, conn := range []net.Conn{toB, toD} {
			if err := roundTrip(conn, "before"); err != nil {
				t.Fatal(err)
			}
		}
		// No kubelet confirms a graceful deletion here: the Pod goes at once.
		m.run(t, "", "delete", "pod", "b", "-n", "ambient-demo", "--grace-period=0", "--force")
		waitFor(t, 20*time.Second, "the tunnel to B ends", func() error {
			if err := roundTrip(toB, "after"); err == nil {
				return errors.New("still open")
			}
			return nil
		})
		if err := roundTrip(toD, "after"); err != nil {
			t.Errorf("the tunnel to D ended too: %v", err)
		}
	})
}

// renderAmbientWorld is the test's API objects: namespace ambient-demo in
// ambient mode with pods A, B, D (captured: the annotation the CNI writes),
// namespace plain with C, the Service b, and the node proxies' Pods.
// externalServiceYAML is a selector-less Service in namespace plain whose
// one endpoint, at ip:8080, a hand-written EndpointSlice names.
func externalServiceYAML(ip netip.Addr) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: ext, namespace: plain}
spec:
  clusterIP: 10.0.0.78
  ports: [{name: tcp, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ext-manual
  namespace: plain
  labels: {kubernetes.io/service-name: ext}
addressType: IPv4
ports: [{name: tcp, port: 8080, protocol: TCP}]
endpoints:
- addresses: [%s]
  conditions: {ready: true}
`, ip)
}

func ambientWorldYAML() string {
	pod := func(ns, name, node, sa string, ambient bool) string {
		annotations := ""
		if ambient {
			annotations = "\n  annotations: {ambient.istio.io/redirection: enabled}"
		}
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  labels: {app: %s}%s
spec:
  nodeName: %s
  serviceAccountName: %s
  containers: [{name: app, image: example/app}]
`, name, ns, name, annotations, node, sa)
	}
	docs := []string{
		"apiVersion: v1\nkind: Namespace\nmetadata: {name: ambient-demo, labels: {istio.io/dataplane-mode: ambient}}\n",
		"apiVersion: v1\nkind: Namespace\nmetadata: {name: plain}\n",
	}
	for _, sa := range []string{"a", "b", "d", "tester"} {
		docs = append(docs, "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: "+sa+", namespace: ambient-demo}\n")
	}
	docs = append(docs,
		"apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: c, namespace: plain}\n",
		"apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: ztunnel, namespace: istio-system}\n",
		pod("ambient-demo", "a", "node-1", "a", true),
		pod("ambient-demo", "d", "node-1", "d", true),
		pod("ambient-demo", "b", "node-2", "b", true),
		pod("plain", "c", "node-2", "c", false),
		pod("istio-system", "ztunnel-node-1", "node-1", "ztunnel", false),
		pod("istio-system", "ztunnel-node-2", "node-2", "ztunnel", false),
		`apiVersion: v1
kind: Service
metadata: {name: b, namespace: ambient-demo}
spec:
  clusterIP: 10.0.0.77
  selector: {app: b}
  ports: [{name: tcp, port: 80, targetPort: 8080}]
`)
	return strings.Join(docs, "---\n")
}

func setPodIP(t *testing.T, m *kubeMesh, ns, name string, ip netip.Addr) {
	t.Helper()
	m.run(t, "", "patch", "pod", name, "-n", ns, "--subresource=status", "--type=merge",
		"-p", fmt.Sprintf(`{"status":{"phase":"Running","podIP":"%s","podIPs":[{"ip":"%s"}],"conditions":[{"type":"Ready","status":"True"}]}}`, ip, ip))
}

// startNodeProxy runs a node proxy for node as the DaemonSet's Pod there
// would: its token bound to its Pod, over TLS trusting the published root.
func startNodeProxy(t *testing.T, m *kubeMesh, cp *controlPlane, node string, netnsOf map[string]string, logs io.Writer) *nodeproxy.Proxy {
	t.Helper()
	p, _ := startNodeProxyWith(t, m, cp, node, netnsOf, logs, nil)
	return p
}

// startNodeProxyWith is startNodeProxy with more options (the node agent's)
// set by with, and a stop that ends the proxy as SIGTERM would.
func startNodeProxyWith(t *testing.T, m *kubeMesh, cp *controlPlane, node string, netnsOf map[string]string, logs io.Writer,
	with func(*nodeproxy.Options)) (*nodeproxy.Proxy, func()) {
	t.Helper()
	_, serverTLS := publishedRootTLS(t, m, "istio-system")
	token := m.createBoundToken(t, "istio-system", "ztunnel", "istio-ca", "ztunnel-"+node)
	conn, err := grpc.NewClient(cp.secureXDSAddr, grpc.WithTransportCredentials(credentials.NewTLS(serverTLS)),
		grpc.WithPerRPCCredentials(caclient.BearerToken(func(context.Context) (string, error) { return token, nil })))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	opts := nodeproxy.Options{
		Node: node, Conn: conn, IP: "127.0.0.1", PodName: "ztunnel-" + node, Namespace: "istio-system",
		PodNetns: func(ns, name string) (string, error) {
			if path, ok := netnsOf[ns+"/"+name]; ok {
				return path, nil
			}
			return "", fmt.Errorf("no network namespace for %s/%s", ns, name)
		},
		Log: slog.New(slog.NewTextHandler(logs, nil)),
	}
	if with != nil {
		with(&opts)
	}
	p, err := nodeproxy.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.Run(ctx, time.Second); err != nil {
			t.Errorf("node proxy %s: %v", node, err)
		}
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return p, stop
}

// createBoundToken is a token bound to a Pod, as the kubelet projects into
// it: the CA learns the caller's node from that Pod.
func (m *kubeMesh) createBoundToken(t *testing.T, ns, sa, audience, pod string) string {
	t.Helper()
	cmd := m.command("create", "token", sa, "-n", ns, "--audience", audience,
		"--bound-object-kind", "Pod", "--bound-object-name", pod)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl create token: %v\n%s", err, errOut.String())
	}
	return strings.TrimSpace(out.String())
}

// meshCertificate gets a workload certificate from the CA with a token of
// ns/sa, as any client of the CA may.
func meshCertificate(t *testing.T, m *kubeMesh, cp *controlPlane, ns, sa string) *caclient.Certificate {
	t.Helper()
	_, serverTLS := publishedRootTLS(t, m, ns)
	conn, err := grpc.NewClient(cp.secureXDSAddr, grpc.WithTransportCredentials(credentials.NewTLS(serverTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	token := m.createToken(t, ns, sa, "istio-ca")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cert, err := caclient.New(caclient.Options{Conn: conn, Token: func(context.Context) (string, error) { return token, nil }}).
		Certificate(ctx, caclient.Request{Identity: "spiffe://cluster.local/ns/" + ns + "/sa/" + sa})
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// verifyChain checks the server's chain against roots, without a DNS name:
// a workload is known by its SPIFFE identity, which the test checks itself.
func verifyChain(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("no server certificate")
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
		return err
	}
}

// tcpEcho answers every connection with what it reads, and closes its
// side once the client has closed its own.
type tcpEcho struct {
	mu   sync.Mutex
	last netip.Addr
}

func startEcho(t *testing.T, p podNet) *tcpEcho {
	t.Helper()
	l, err := netns.Listen(p.path, netip.AddrPortFrom(netip.IPv4Unspecified(), 8080), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	s := &tcpEcho{}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
				s.mu.Lock()
				s.last = ap.Addr()
				s.mu.Unlock()
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return s
}

func (s *tcpEcho) lastPeer() netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// openEcho connects from inside p, as its application would: the capture
// sends the connection to the node proxy.
func openEcho(p podNet, dst netip.AddrPort) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return netns.Dial(ctx, p.path, dst, nil)
}

// echoOnce sends payload, half-closes, and expects it back in full.
func echoOnce(p podNet, dst netip.AddrPort, payload string) error {
	conn, err := openEcho(p, dst)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	errc := make(chan error, 1)
	go func() {
		_, err := io.WriteString(conn, payload)
		if err == nil {
			err = conn.(*net.TCPConn).CloseWrite()
		}
		errc <- err
	}()
	got, err := io.ReadAll(conn)
	if werr := <-errc; werr != nil {
		return fmt.Errorf("write: %w", werr)
	}
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if string(got) != payload {
		return fmt.Errorf("echoed %d bytes, sent %d", len(got), len(payload))
	}
	return nil
}

// roundTrip writes a line and reads it back on an open connection.
func roundTrip(conn net.Conn, line string) error {
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(conn, line); err != nil {
		return err
	}
	buf := make([]byte, len(line))
	if _, err := io.ReadFull(conn, buf); err != nil {
		return err
	}
	if string(buf) != line {
		return fmt.Errorf("got %q back", buf)
	}
	return nil
}
