package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"

	dto "github.com/prometheus/client_model/go"
)

// TestCAOverSecureXDS is the workload's view of the CA, with nothing but
// what a pod has: a ServiceAccount token made by `kubectl create token`, and
// the root published in its namespace's ConfigMap istio-ca-root-cert. It
// gets a certificate for its own SPIFFE identity over TLS on 15012, then
// uses that certificate to open ADS on the same port.
func TestCAOverSecureXDS(t *testing.T) {
	t.Parallel()
	m := newKubeMesh(t)
	const ns, sa = "ca-e2e", "web"
	m.apply(t, "world", `
apiVersion: v1
kind: Namespace
metadata: {name: ca-e2e}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: web, namespace: ca-e2e}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ca-e2e}
spec:
  selector: {app: web}
  ports: [{name: http, port: 8080}]
`)
	cp := startControlPlane(t, m)
	if cp.secureXDSAddr == "" {
		t.Fatal("no secure xDS listener with a Kubernetes source")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The root comes from the API server, as a pod mounts it: this is the
	// proof that the publisher wrote it.
	rootPEM, serverTLS := publishedRootTLS(t, m, ns)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	wantID := "spiffe://cluster.local/ns/" + ns + "/sa/" + sa
	csr := newCSR(t, key, wantID)

	caClient := func(t *testing.T) pb.IstioCertificateServiceClient {
		conn, err := grpc.NewClient(cp.secureXDSAddr, grpc.WithTransportCredentials(credentials.NewTLS(serverTLS.Clone())))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return pb.NewIstioCertificateServiceClient(conn)
	}
	withToken := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}

	var chain [][]byte
	t.Run("a token for istio-ca gets a certificate for its own identity", func(t *testing.T) {
		token := m.createToken(t, ns, sa, "istio-ca")
		resp, err := caClient(t).CreateCertificate(withToken(token), &pb.IstioCertificateRequest{Csr: string(csr), ValidityDuration: 3600})
		if err != nil {
			t.Fatalf("CreateCertificate: %v", err)
		}
		certs := resp.GetCertChain()
		if len(certs) < 2 {
			t.Fatalf("cert_chain has %d elements, want leaf ... root", len(certs))
		}
		// istiod's order: leaf first, root last.
		if got := strings.TrimSpace(certs[len(certs)-1]); got != strings.TrimSpace(string(rootPEM)) {
			t.Errorf("the last element is not the published root:\n%s", got)
		}
		var parsed []*x509.Certificate
		for _, c := range certs[:len(certs)-1] {
			block, _ := pem.Decode([]byte(c))
			if block == nil {
				t.Fatalf("not PEM: %q", c)
			}
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			parsed = append(parsed, cert)
			chain = append(chain, block.Bytes)
		}
		leaf := parsed[0]
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != wantID {
			t.Errorf("leaf URI SANs %v, want exactly %s", leaf.URIs, wantID)
		}
		intermediates := x509.NewCertPool()
		for _, c := range parsed[1:] {
			intermediates.AddCert(c)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: serverTLS.RootCAs, Intermediates: intermediates,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("the leaf does not chain to the published root: %v", err)
		}
		pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
		if !ok || !pub.Equal(key.Public()) {
			t.Error("the leaf does not certify the CSR's key")
		}
	})

	t.Run("a token for another audience is Unauthenticated", func(t *testing.T) {
		token := m.createToken(t, ns, sa, "not-istio-ca")
		_, err := caClient(t).CreateCertificate(withToken(token), &pb.IstioCertificateRequest{Csr: string(csr), ValidityDuration: 3600})
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("CreateCertificate with a token for audience not-istio-ca: %v, want Unauthenticated", err)
		}
	})

	// secureADS opens an ADS stream on 15012, with the issued certificate
	// as the client certificate when withCert is set.
	secureADS := func(t *testing.T, withCert bool) discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
		t.Helper()
		clientTLS := serverTLS.Clone()
		if withCert {
			if chain == nil {
				t.Fatal("no certificate was issued (see the issuance subtest)")
			}
			clientTLS.Certificates = []tls.Certificate{{Certificate: chain, PrivateKey: key}}
		}
		conn, err := grpc.NewClient(cp.secureXDSAddr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return stream
	}

	t.Run("ADS over mTLS with the issued certificate", func(t *testing.T) {
		// The node claims the namespace the certificate proves.
		stream := secureADS(t, true)
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: sidecarNode(ns), TypeUrl: clusterType}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("CDS over 15012: %v", err)
		}
		clusters := clustersOf(t, resp)
		if _, ok := clusters["outbound|8080||web."+ns+".svc.cluster.local"]; !ok {
			t.Errorf("CDS over 15012 lacks the web cluster; got %v", keys(clusters))
		}
	})

	t.Run("a proxy claiming another namespace than its certificate's is refused", func(t *testing.T) {
		stream := secureADS(t, true)
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: sidecarNode("istio-system"), TypeUrl: clusterType}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("CDS claiming istio-system with a certificate for %s: %v, want PermissionDenied", ns, err)
		}
	})

	t.Run("xDS on 15012 without a certificate or token is refused", func(t *testing.T) {
		stream := secureADS(t, false)
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: sidecarNode(ns), TypeUrl: clusterType}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("CDS without proof: %v, want Unauthenticated", err)
		}
	})

	t.Run("a client certificate from another CA proves nothing", func(t *testing.T) {
		foreignKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
			URIs: []*url.URL{mustURL(t, wantID)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, foreignKey.Public(), foreignKey)
		if err != nil {
			t.Fatal(err)
		}
		clientTLS := serverTLS.Clone()
		clientTLS.Certificates = []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: foreignKey}}
		conn, err := grpc.NewClient(cp.secureXDSAddr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// The handshake takes any certificate; the certificate
		// authenticator then verifies it against the mesh root, and a
		// self-made one naming the workload's identity is refused.
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: sidecarNode(ns), TypeUrl: clusterType}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("CDS with a self-signed client certificate: %v, want Unauthenticated naming the certificate", err)
		}
	})

	t.Run("shutdown closes 15012 with the other listeners", func(t *testing.T) {
		cp.stop(t)
		if conn, err := net.DialTimeout("tcp", cp.secureXDSAddr, time.Second); err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections after shutdown", cp.secureXDSAddr)
		}
	})
}

func withH2(c *tls.Config) *tls.Config {
	c.NextProtos = []string{"h2"}
	return c
}

// createToken is `kubectl create token`, as a user or a test of a workload
// would get one.
func (m *kubeMesh) createToken(t *testing.T, ns, sa, audience string) string {
	t.Helper()
	cmd := m.command("create", "token", sa, "-n", ns, "--audience", audience)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl create token: %v\n%s", err, errOut.String())
	}
	return strings.TrimSpace(out.String())
}

// newCSR is what an agent sends: a P-256 key and its SPIFFE URI SAN.
func newCSR(t *testing.T, key *ecdsa.PrivateKey, id string) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{mustURL(t, id)}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(fmt.Errorf("%s: %w", s, err))
	}
	return u
}

// TestPluggedInCARotation: an operator plugs in a CA (root and
// intermediate) while the control plane runs, as the README's `kubectl
// create secret generic cacerts` does. Without a restart, the published
// root, new workload certificates, the serving certificates of 15012 and of
// the webhooks, and the webhook caBundle all move to it, and the expiry
// gauges follow. A broken update then changes nothing: the working CA stays
// and the refusal is counted.
func TestPluggedInCARotation(t *testing.T) {
	t.Parallel()
	m := newKubeMesh(t)
	const ns, sa, rev = "ca-rotate", "web", "1-9-0"
	m.apply(t, "world", `
apiVersion: v1
kind: Namespace
metadata: {name: ca-rotate}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: web, namespace: ca-rotate}
`)
	cp := startControlPlane(t, m, withRevision(rev))
	m.apply(t, "injector", injectorYAML(rev, cp.webhookURL(), "Ignore"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	injector := "istio-sidecar-injector-" + rev

	firstRoot, _ := publishedRootTLS(t, m, ns)
	waitFor(t, 30*time.Second, "the mesh root in the injector's caBundle", func() error {
		return m.expectCABundle(injector, firstRoot)
	})

	// issue asks 15012 for a workload certificate, presenting the client
	// certificate given (if any) and a token (if withToken); it returns the
	// chain, and the certificate with its key.
	issue := func(serverTLS *tls.Config, client *tls.Certificate, withToken bool) ([]string, *tls.Certificate, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		cfg := serverTLS.Clone()
		if client != nil {
			// Always presented, as a workload's agent presents its
			// certificate: with Certificates, Go's client would hold
			// back one whose issuer the server did not list.
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return client, nil }
		}
		conn, err := grpc.NewClient(cp.secureXDSAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		call := ctx
		if withToken {
			call = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+m.createToken(t, ns, sa, "istio-ca"))
		}
		resp, err := pb.NewIstioCertificateServiceClient(conn).CreateCertificate(call, &pb.IstioCertificateRequest{
			Csr: string(newCSR(t, key, "spiffe://cluster.local/ns/"+ns+"/sa/"+sa)), ValidityDuration: 3600})
		if err != nil {
			return nil, nil, err
		}
		chain := resp.GetCertChain()
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		// The leaf and its intermediates; the root comes last.
		issued, err := tls.X509KeyPair([]byte(strings.Join(chain[:len(chain)-1], "\n")),
			pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
		if err != nil {
			t.Fatal(err)
		}
		return chain, &issued, nil
	}
	serverTLSFor := func(root []byte) *tls.Config {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(root)
		return &tls.Config{RootCAs: pool, ServerName: "istiod-" + rev + ".istio-system.svc", MinVersion: tls.VersionTLS12}
	}
	// A workload's certificate from the first root, for after the root
	// has been replaced.
	_, oldCert, err := issue(serverTLSFor(firstRoot), nil, true)
	if err != nil {
		t.Fatalf("CreateCertificate from the first root: %v", err)
	}

	// everythingTrusts checks each place the root reaches.
	everythingTrusts := func(t *testing.T, root []byte) {
		t.Helper()
		waitFor(t, 30*time.Second, "the root in istio-ca-root-cert of "+ns, func() error {
			got, _ := publishedRootTLS(t, m, ns)
			if !bytes.Equal(got, root) {
				return fmt.Errorf("istio-ca-root-cert holds another root")
			}
			return nil
		})
		waitFor(t, 30*time.Second, "the root in the injector's caBundle", func() error {
			return m.expectCABundle(injector, root)
		})
		waitFor(t, 30*time.Second, "a webhook certificate from the root", func() error {
			return cp.webhookChainVerifies(root)
		})
		serverTLS := serverTLSFor(root)
		pool := serverTLS.RootCAs
		waitFor(t, 30*time.Second, "a 15012 certificate from the root", func() error {
			conn, err := tls.Dial("tcp", cp.secureXDSAddr, withH2(serverTLS.Clone()))
			if err != nil {
				return err
			}
			return conn.Close()
		})
		chain, _, err := issue(serverTLS, nil, true)
		if err != nil {
			t.Fatalf("CreateCertificate: %v", err)
		}
		if got := strings.TrimSpace(chain[len(chain)-1]); got != strings.TrimSpace(string(root)) {
			t.Errorf("a new certificate ends with another root than the published one")
		}
		leaf, inter := parseChain(t, chain[:len(chain)-1])
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("a new workload certificate does not chain to the root: %v", err)
		}
	}

	operator := newOperatorCA(t)
	t.Run("plugging in a CA moves everything to its root", func(t *testing.T) {
		dir := t.TempDir()
		for name, data := range operator.files {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		m.run(t, "", "create", "secret", "generic", "cacerts", "-n", "istio-system",
			"--from-file="+filepath.Join(dir, "ca-cert.pem"), "--from-file="+filepath.Join(dir, "ca-key.pem"),
			"--from-file="+filepath.Join(dir, "root-cert.pem"), "--from-file="+filepath.Join(dir, "cert-chain.pem"))
		everythingTrusts(t, operator.files["root-cert.pem"])
		if bytes.Equal(operator.files["root-cert.pem"], firstRoot) {
			t.Fatal("the operator's root is the self-signed one")
		}
		if got := cp.metric(t, "citadel_server_root_cert_expiry_timestamp"); got != float64(operator.root.NotAfter.Unix()) {
			t.Errorf("citadel_server_root_cert_expiry_timestamp = %v, want %v", got, operator.root.NotAfter.Unix())
		}
		if got := cp.metric(t, "citadel_server_cert_chain_expiry_timestamp"); got != float64(operator.intermediate.NotAfter.Unix()) {
			t.Errorf("citadel_server_cert_chain_expiry_timestamp = %v, want %v", got, operator.intermediate.NotAfter.Unix())
		}
	})

	// A workload whose certificate is from the replaced root still reaches
	// 15012: the handshake does not judge its certificate, the certificate
	// authenticator refuses it, and its token renews it.
	t.Run("a certificate of the replaced root does not lock its workload out", func(t *testing.T) {
		serverTLS := serverTLSFor(operator.files["root-cert.pem"])
		chain, _, err := issue(serverTLS, oldCert, true)
		if err != nil {
			t.Fatalf("CreateCertificate with the old certificate and a token: %v", err)
		}
		if got := strings.TrimSpace(chain[len(chain)-1]); got != strings.TrimSpace(string(operator.files["root-cert.pem"])) {
			t.Error("the renewed certificate does not end with the new root")
		}
		_, _, err = issue(serverTLS, oldCert, false)
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("CreateCertificate with the old certificate alone: %v, want Unauthenticated, naming the certificate", err)
		}
	})

	t.Run("a broken update keeps the working CA", func(t *testing.T) {
		wrongKey := newOperatorCA(t).files["ca-key.pem"]
		patch := fmt.Sprintf(`{"data":{"ca-key.pem":%q}}`, base64.StdEncoding.EncodeToString(wrongKey))
		m.run(t, "", "patch", "secret", "cacerts", "-n", "istio-system", "--type=merge", "-p", patch)
		waitFor(t, 30*time.Second, "the refusal to be counted", func() error {
			if got := cp.metric(t, "meshpilot_ca_root_reloads_total", "result", "error"); got < 1 {
				return fmt.Errorf("meshpilot_ca_root_reloads_total{result=error} = %v", got)
			}
			return nil
		})
		everythingTrusts(t, operator.files["root-cert.pem"])
	})
}

// operatorCA is what an operator plugs in: a root, and an intermediate that
// signs, in Istio's four files.
type operatorCA struct {
	root, intermediate *x509.Certificate
	files              map[string][]byte
}

func newOperatorCA(t *testing.T) operatorCA {
	t.Helper()
	newCA := func(name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(48 * time.Hour),
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true}
		if parent == nil {
			parent, parentKey = tmpl, key
			tmpl.NotAfter = time.Now().Add(72 * time.Hour)
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	root, rootKey, rootPEM := newCA("operator root", nil, nil)
	inter, interKey, interPEM := newCA("operator intermediate", root, rootKey)
	keyDER, err := x509.MarshalPKCS8PrivateKey(interKey)
	if err != nil {
		t.Fatal(err)
	}
	return operatorCA{root: root, intermediate: inter, files: map[string][]byte{
		"ca-cert.pem":    interPEM,
		"ca-key.pem":     pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		"cert-chain.pem": append(append([]byte{}, interPEM...), rootPEM...),
		"root-cert.pem":  rootPEM,
	}}
}

// parseChain parses PEM certificates, leaf first.
func parseChain(t *testing.T, pems []string) (*x509.Certificate, *x509.CertPool) {
	t.Helper()
	inter := x509.NewCertPool()
	var leaf *x509.Certificate
	for i, p := range pems {
		block, _ := pem.Decode([]byte(p))
		if block == nil {
			t.Fatalf("not PEM: %q", p)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			leaf = c
		} else {
			inter.AddCert(c)
		}
	}
	return leaf, inter
}

// metric is the value of a gauge or counter the control plane exports,
// matched by name and, if given, one label pair; 0 when absent.
func (cp *controlPlane) metric(t *testing.T, name string, label ...string) float64 {
	t.Helper()
	families, err := cp.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if len(label) == 2 && !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
				return l.GetName() == label[0] && l.GetValue() == label[1]
			}) {
				continue
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
