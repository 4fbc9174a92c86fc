package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/xds"
	pb "istio.io/api/security/v1alpha1"
)

// issueCertFiles does for ServiceAccount ns/sa what Istio's agent does with
// OUTPUT_CERTS for a proxyless workload: it gets a certificate from
// meshpilot's CA with the account's token and writes cert-chain.pem,
// key.pem and root-cert.pem into a directory, which it returns.
func issueCertFiles(t *testing.T, m *kubeMesh, cp *controlPlane, ns, sa string) string {
	t.Helper()
	m.apply(t, "serviceaccount-"+ns+"-"+sa, "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: "+sa+", namespace: "+ns+"}\n")
	rootPEM, serverTLS := publishedRootTLS(t, m, ns)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(cp.secureXDSAddr, grpc.WithTransportCredentials(credentials.NewTLS(serverTLS)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	token := m.createToken(t, ns, sa, "istio-ca")
	resp, err := pb.NewIstioCertificateServiceClient(conn).CreateCertificate(
		metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token),
		&pb.IstioCertificateRequest{Csr: string(newCSR(t, key, spiffeID(ns, sa))), ValidityDuration: 3600})
	if err != nil {
		t.Fatalf("certificate for %s/%s: %v", ns, sa, err)
	}
	certs := resp.GetCertChain()
	if len(certs) < 2 {
		t.Fatalf("cert_chain has %d elements, want leaf ... root", len(certs))
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string][]byte{
		// The leaf and any intermediates; the root is last in the response.
		"cert-chain.pem": []byte(strings.Join(certs[:len(certs)-1], "")),
		"key.pem":        pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		"root-cert.pem":  rootPEM,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func spiffeID(ns, sa string) string { return "spiffe://cluster.local/ns/" + ns + "/sa/" + sa }

// mtlsBootstrapJSON is bootstrapJSON plus the certificate provider Istio's
// agent writes: instance "default", the file_watcher plugin, on certDir.
func mtlsBootstrapJSON(t *testing.T, xdsAddr, nodeID, namespace, ip string, labels map[string]string, certDir string) []byte {
	t.Helper()
	var boot map[string]any
	if err := json.Unmarshal(bootstrapJSON(xdsAddr, nodeID, namespace, ip, labels), &boot); err != nil {
		t.Fatal(err)
	}
	boot["certificate_providers"] = map[string]any{
		"default": map[string]any{
			"plugin_name": "file_watcher",
			"config": map[string]any{
				"certificate_file":    filepath.Join(certDir, "cert-chain.pem"),
				"private_key_file":    filepath.Join(certDir, "key.pem"),
				"ca_certificate_file": filepath.Join(certDir, "root-cert.pem"),
				"refresh_interval":    "900s",
			},
		},
	}
	out, err := json.Marshal(boot)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// peerEchoServer answers with the SPIFFE identity of the client's
// certificate, as the TLS handshake verified it ("" over plaintext), in
// SimpleResponse.username.
type peerEchoServer struct {
	testgrpc.UnimplementedTestServiceServer
	id string
}

func (s *peerEchoServer) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{ServerId: s.id, Username: peerSPIFFEID(ctx)}, nil
}

func peerSPIFFEID(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return ""
	}
	var ids []string
	for _, u := range info.State.PeerCertificates[0].URIs {
		ids = append(ids, u.String())
	}
	return strings.Join(ids, ",")
}

// startMTLSBackend is a grpc-go xDS server with xDS credentials: mutual TLS
// from its bootstrap's certificate files when its inbound listener says so,
// plaintext (the fallback) when it does not.
func startMTLSBackend(t *testing.T, cp *controlPlane, ip, namespace, pod string, labels map[string]string, certDir string) int {
	t.Helper()
	creds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	boot := mtlsBootstrapJSON(t, cp.xdsAddr, nodeID(ip, pod, namespace), namespace, ip, labels, certDir)
	srv, err := xds.NewGRPCServer(grpc.Creds(creds), xds.BootstrapContentsForTesting(boot))
	if err != nil {
		t.Fatalf("xds server: %v", err)
	}
	testgrpc.RegisterTestServiceServer(srv, &peerEchoServer{id: pod})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().(*net.TCPAddr).Port
}

// newMTLSClient is a grpc-go xDS client with xDS credentials and the
// certificate files in certDir: it uses mutual TLS towards clusters whose
// CDS says so, plaintext (the fallback) elsewhere.
func newMTLSClient(t *testing.T, cp *controlPlane, ip, namespace, pod, target, certDir string) testgrpc.TestServiceClient {
	t.Helper()
	creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	return newXDSClient(t, cp, ip, namespace, pod, target, certDir, creds)
}

// newCertlessClient is a grpc-go xDS client with insecure credentials: it
// presents no certificate and speaks plaintext whatever CDS says. Its
// bootstrap still names the certificate provider, as Istio's agent writes
// it: grpc-go NACKs a cluster whose TLS names a provider instance the
// bootstrap lacks, whatever credentials the channel uses.
func newCertlessClient(t *testing.T, cp *controlPlane, ip, namespace, pod, target, certDir string) testgrpc.TestServiceClient {
	t.Helper()
	return newXDSClient(t, cp, ip, namespace, pod, target, certDir, insecure.NewCredentials())
}

func newXDSClient(t *testing.T, cp *controlPlane, ip, namespace, pod, target, certDir string, creds credentials.TransportCredentials) testgrpc.TestServiceClient {
	t.Helper()
	boot := mtlsBootstrapJSON(t, cp.xdsAddr, nodeID(ip, pod, namespace), namespace, ip, map[string]string{"app": "client"}, certDir)
	resolver, err := xds.NewXDSResolverWithConfigForTesting(boot)
	if err != nil {
		t.Fatalf("xds resolver: %v", err)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds), grpc.WithResolvers(resolver))
	if err != nil {
		t.Fatalf("dial %s: %v", target, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return testgrpc.NewTestServiceClient(conn)
}
