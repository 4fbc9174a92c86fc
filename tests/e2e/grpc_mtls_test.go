package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/pkg/xds"
)

// TestGRPCMutualTLS proves mutual TLS between two foreign ends: grpc-go's
// xDS client and xDS server, each with xDS credentials and a bootstrap
// whose file_watcher certificate provider reads files that meshpilot's CA
// issued to its ServiceAccount (through a token from the real API server).
// The server reports the SPIFFE identity of the client certificate it
// verified, and the client the identity of the server's. Config is applied
// through the API server: a DestinationRule for the client side, a
// PeerAuthentication for the server side.
func TestGRPCMutualTLS(t *testing.T) {
	t.Parallel()
	const ns = "grpc-mtls"
	ip := hostIP(t)
	host := "echo." + ns + ".svc.cluster.local"
	target := "xds:///" + host + ":7070"
	clientID, serverID := spiffeID(ns, "client"), spiffeID(ns, "echo")

	m := newKubeMesh(t)
	m.apply(t, "world", strings.ReplaceAll(mtlsWorldYAML, "{{NS}}", ns))
	cp := startControlPlane(t, m)
	serverCerts := issueCertFiles(t, m, cp, ns, "echo")
	clientCerts := issueCertFiles(t, m, cp, ns, "client")
	port := startMTLSBackend(t, cp, ip, ns, "echo-0", map[string]string{"app": "echo"}, serverCerts)
	m.apply(t, "slice", fmt.Sprintf(mtlsSliceYAML, ns, port, ip, ns))
	mtlsClient := newMTLSClient(t, cp, ip, ns, "client-mtls-0", target, clientCerts)

	policy := func(mode string) {
		m.apply(t, "peer-authentication", fmt.Sprintf(peerAuthnYAML, ns, mode))
	}
	rule := func(tls string) {
		m.apply(t, "destination-rule", fmt.Sprintf(mtlsRuleYAML, ns, host, tls))
	}

	t.Run("without rules both ends speak plaintext", func(t *testing.T) {
		waitFor(t, 30*time.Second, "an RPC through xDS", func() error {
			return expectPeers(mtlsClient, "", "")
		})
	})

	t.Run("ISTIO_MUTUAL and STRICT: each end sees the other's SPIFFE identity", func(t *testing.T) {
		rule("{mode: ISTIO_MUTUAL}")
		policy("STRICT")
		waitFor(t, 30*time.Second, "an RPC over mutual TLS", func() error {
			return expectPeers(mtlsClient, clientID, serverID)
		})
		requireAllACKed(t, cp)
	})

	t.Run("STRICT refuses a client without a certificate", func(t *testing.T) {
		// The server is STRICT now (the subtest above saw the client's
		// certificate), so a client's first RPC tells.
		_, _, err := peersCall(newCertlessClient(t, cp, ip, ns, "client-plain-0", target, clientCerts))
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "connection error") {
			t.Fatalf("plaintext RPC to a STRICT server: %v, want Unavailable for the connection", err)
		}
		t.Logf("refused as expected: %v", err)
		// The refusal is the server's, not a config the client rejected,
		// and the mTLS client beside it still gets through.
		requireAllACKed(t, cp)
		if err := expectPeers(mtlsClient, clientID, serverID); err != nil {
			t.Fatalf("the mTLS client beside it: %v", err)
		}
	})

	t.Run("the client refuses a server outside the rule's subjectAltNames", func(t *testing.T) {
		other := spiffeID(ns, "someone-else")
		rule("{mode: ISTIO_MUTUAL, subjectAltNames: [" + other + "]}")
		// grpc-go checks SANs at the handshake only, so the new client must
		// connect after the rule is served: a connection made under the
		// previous rule would stay up.
		waitFor(t, 30*time.Second, "the rule's SAN in the served clusters", func() error {
			code, body := cp.get(t, "/debug/config_dump?proxyID="+url.QueryEscape(nodeID(ip, "client-mtls-0", ns)))
			if code != http.StatusOK || !strings.Contains(body, other) {
				return fmt.Errorf("config_dump %d lacks %s", code, other)
			}
			return nil
		})
		client := newMTLSClient(t, cp, ip, ns, "client-mtls-1", target, clientCerts)
		waitFor(t, 30*time.Second, "the SAN check to refuse the server", func() error {
			_, _, err := peersCall(client)
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "do not match any of the accepted SANs") {
				return fmt.Errorf("got %v, want Unavailable for a SAN mismatch", err)
			}
			return nil
		})
		rule("{mode: ISTIO_MUTUAL, subjectAltNames: [" + serverID + "]}")
		waitFor(t, 30*time.Second, "the rule naming the server to be accepted", func() error {
			return expectPeers(client, clientID, serverID)
		})
		requireAllACKed(t, cp)
	})

	t.Run("PERMISSIVE accepts a client without a certificate", func(t *testing.T) {
		policy("PERMISSIVE")
		client := newCertlessClient(t, cp, ip, ns, "client-plain-1", target, clientCerts)
		waitFor(t, 30*time.Second, "a plaintext RPC to the PERMISSIVE server", func() error {
			return expectPeers(client, "", "")
		})
		requireAllACKed(t, cp)
	})
}

// peersCall makes one RPC and returns the identity the server saw in the client's
// certificate and the one the client saw in the server's. It does not wait
// for the channel to be ready: a refused connection fails the RPC with
// Unavailable and the handshake's error.
func peersCall(c testgrpc.TestServiceClient) (serverSaw, clientSaw string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var p peer.Peer
	resp, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Peer(&p))
	if err != nil {
		return "", "", err
	}
	if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
		for _, u := range info.State.PeerCertificates[0].URIs {
			clientSaw = u.String()
		}
	}
	return resp.GetUsername(), clientSaw, nil
}

func expectPeers(c testgrpc.TestServiceClient, wantServerSaw, wantClientSaw string) error {
	serverSaw, clientSaw, err := peersCall(c)
	if err != nil {
		return err
	}
	if serverSaw != wantServerSaw || clientSaw != wantClientSaw {
		return fmt.Errorf("server saw client %q, client saw server %q; want %q and %q", serverSaw, clientSaw, wantServerSaw, wantClientSaw)
	}
	return nil
}

// requireAllACKed waits until every connection has ACKed every version it
// was sent, and fails on any NACK: grpc-go accepted all it got.
func requireAllACKed(t *testing.T, cp *controlPlane) {
	t.Helper()
	waitFor(t, 30*time.Second, "every response ACKed", func() error {
		code, body := cp.get(t, "/debug/syncz")
		if code != http.StatusOK {
			return fmt.Errorf("/debug/syncz: %d %s", code, body)
		}
		var conns []xds.SyncStatus
		if err := json.Unmarshal([]byte(body), &conns); err != nil {
			return err
		}
		for _, c := range conns {
			for _, ty := range c.Types {
				if ty.Nack != nil {
					t.Fatalf("%s NACKed %s: %+v", c.ProxyID, ty.Type, ty.Nack)
				}
				if ty.SentVersion != ty.AckedVersion {
					return fmt.Errorf("%s %s: sent %q, acked %q", c.ProxyID, ty.Type, ty.SentVersion, ty.AckedVersion)
				}
			}
		}
		return nil
	})
	if n := cp.nacks(t); n != 0 {
		t.Fatalf("%v NACKs", n)
	}
}

// mtlsWorldYAML is the namespace, the two ServiceAccounts, and the echo
// Service with its one Pod, whose account is the server's identity.
const mtlsWorldYAML = `
apiVersion: v1
kind: Namespace
metadata: {name: {{NS}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: echo, namespace: {{NS}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: client, namespace: {{NS}}}
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: {{NS}}}
spec:
  selector: {app: echo}
  ports: [{name: grpc, port: 7070, targetPort: grpc}]
---
apiVersion: v1
kind: Pod
metadata:
  name: echo-0
  namespace: {{NS}}
  labels: {app: echo}
spec:
  serviceAccountName: echo
  containers: [{name: echo, image: example/echo}]
`

const mtlsSliceYAML = `
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo-0
  namespace: %s
  labels: {kubernetes.io/service-name: echo}
addressType: IPv4
ports: [{name: grpc, port: %d}]
endpoints:
- addresses: ["%s"]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: echo-0, namespace: %s}
`

const peerAuthnYAML = `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: %s}
spec:
  mtls: {mode: %s}
`

const mtlsRuleYAML = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: %s}
spec:
  host: %s
  trafficPolicy:
    tls: %s
`
