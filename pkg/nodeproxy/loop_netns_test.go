package nodeproxy

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshpilot/meshpilot/internal/netnstest"
	"github.com/meshpilot/meshpilot/internal/testcerts"
	"github.com/meshpilot/meshpilot/internal/testlog"
	"github.com/meshpilot/meshpilot/pkg/caclient"
	"github.com/meshpilot/meshpilot/pkg/capture"
	"github.com/meshpilot/meshpilot/pkg/hbone"
	"github.com/meshpilot/meshpilot/pkg/netns"
	"github.com/meshpilot/meshpilot/pkg/workloadapi"
)

// TestLoopRefused serves one workload in a namespace with the real
// capture, from a client outside the mesh in another, and sends
// connections whose destination is one of the proxy's own ports there.
// Each must be refused without the proxy dialling itself: the kernel
// counts the proxy's (marked) packets to its own ports. Unfixed, the first
// connection loops and the count grows at once; the test fails then rather
// than wait for the file descriptors to run out.
func TestLoopRefused(t *testing.T) {
	client, pod := netnstest.Pair(t)
	if err := capture.NFTables.Install(pod.Path, capture.Ports{Outbound: OutboundPort,
		Inbound: InboundPlaintextPort, HBONE: HBONEPort, Mark: SocketMark}); err != nil {
		t.Fatal(err)
	}
	selfDials := countSelfDials(t, pod.Path)
	echo(t, pod.Path, netip.AddrPortFrom(pod.IP, 8080))
	logs := &testlog.Buffer{}
	p, w, ca := serveOne(t, pod, logs)
	at := func(port uint16) netip.AddrPort { return netip.AddrPortFrom(pod.IP, port) }
	loopback := netip.MustParseAddr("127.0.0.1")

	t.Run("plaintext", func(t *testing.T) {
		// The application's port still works through the same capture.
		if got := roundTrip(t, client.Path, at(8080)); got != "hello" {
			t.Fatalf("echo through the capture: %q", got)
		}
		for _, tc := range []struct {
			name      string
			from      string
			dest      netip.AddrPort
			direction string
		}{
			{"outside to pod_ip:15006", client.Path, at(InboundPlaintextPort), "inbound"},
			{"outside to pod_ip:15001", client.Path, at(OutboundPort), "inbound"},
			{"pod to its own pod_ip:15006", pod.Path, at(InboundPlaintextPort), "inbound"},
			{"pod to 127.0.0.1:15001", pod.Path, netip.AddrPortFrom(loopback, OutboundPort), "outbound"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				refusals := p.m.refusals.WithLabelValues(tc.direction, reasonLoop)
				before := testutil.ToFloat64(refusals)
				dials := selfDials(t)
				c := dialIn(t, tc.from, tc.dest)
				expectClosed(t, c, selfDials, dials)
				if got := testutil.ToFloat64(refusals) - before; got != 1 {
					t.Errorf("%s %s refusals counted: %v, want 1", tc.direction, reasonLoop, got)
				}
			})
		}
	})

	t.Run("hbone", func(t *testing.T) {
		d, err := hbone.NewDialer(hbone.DialerConfig{
			Roots: func() *x509.CertPool { return ca.Pool },
			NetDial: func(ctx context.Context, node netip.AddrPort) (net.Conn, error) {
				return netns.Dial(ctx, client.Path, node, nil)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		src := ca.Issue(t, "spiffe://cluster.local/ns/app/sa/client")
		connect := func(ctx context.Context, port uint16) (*hbone.Conn, error) {
			return d.Dial(ctx, &src, hbone.Target{Node: at(HBONEPort), Dest: at(port), Identity: identity(w)})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ok, err := connect(ctx, 8080)
		if err != nil {
			t.Fatalf("CONNECT to the application's port: %v", err)
		}
		ok.Close()
		for _, port := range listenerPorts {
			before := selfDials(t)
			c, err := connect(ctx, port)
			n := selfDials(t) - before
			if c != nil {
				c.Close()
			}
			var se *hbone.StatusError
			if !errors.As(err, &se) || se.Code != 403 || n != 0 {
				t.Fatalf("CONNECT to pod_ip:%d: %v, after %d packets from the proxy to its own ports; want 403 and none",
					port, err, n)
			}
		}
	})

	// Everything counted; warned of once, however many there were.
	if n := strings.Count(logs.String(), "level=WARN msg=\"connection to the node proxy's own port refused\""); n != 1 {
		t.Errorf("%d loop warnings logged, want 1 (then debug):\n%s", n, logs)
	}
}

// serveOne starts a node proxy serving one HBONE workload at pod's
// address in pod's namespace, with a certificate from a throwaway CA; WDS
// and the CA are never reached.
func serveOne(t *testing.T, pod netnstest.Namespace, logs io.Writer) (*Proxy, *workloadapi.Workload, *testcerts.CA) {
	t.Helper()
	p, err := New(Options{Node: "node-1", Conn: noConn{},
		PodNetns: func(string, string) (string, error) { return pod.Path, nil },
		Log:      slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	w := &workloadapi.Workload{Uid: "Kubernetes//Pod/app/a", Namespace: "app", Name: "a", Node: "node-1",
		ServiceAccount: "a", Addresses: [][]byte{pod.IP.AsSlice()}, TunnelProtocol: workloadapi.TunnelProtocol_HBONE}
	// In the directory, so that an unfixed outbound loop goes through
	// HBONE, as it would in a cluster.
	p.dir.Apply(map[string]*workloadapi.Address{w.Uid: {Type: &workloadapi.Address_Workload{Workload: w}}}, nil)
	ca := testcerts.NewCA(t, "cluster.local")
	cert := ca.Issue(t, identity(w))
	p.certs.want([]string{identity(w)})
	p.certs.store(identity(w), &caclient.Certificate{Identity: identity(w), TLS: cert, Leaf: cert.Leaf,
		RootPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})})
	lw, err := p.startWorkload(w, pod.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lw.close)
	return p, w, ca
}
