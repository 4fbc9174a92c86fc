package caclient

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/pkg/ca"
)

const webID = "spiffe://cluster.local/ns/app/sa/web"

// meshCA runs meshpilot's own CA server on a local TLS listener, with the
// certificate authenticator: a caller proves itself with a certificate
// the CA issued, as when it renews.
func meshCA(t *testing.T) (*ca.Authority, string) {
	t.Helper()
	authority, err := ca.NewSelfSigned(ca.Options{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.NewServer(ca.ServerOptions{Authority: authority, Authenticators: []ca.Authenticator{ca.NewCertAuthenticator(authority)}})
	if err != nil {
		t.Fatal(err)
	}
	serving, err := authority.ServingCertificate([]string{"localhost", "127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{*serving}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: authority.RootPool(),
	})))
	server.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return authority, lis.Addr().String()
}

// provenConn dials the CA with a certificate the CA issued for identity.
func provenConn(t *testing.T, authority *ca.Authority, addr, identity string) *grpc.ClientConn {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(identity)
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, key)
	if err != nil {
		t.Fatal(err)
	}
	id, err := ca.ParseIdentity(identity)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := authority.Sign(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr}), id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs:      authority.RootPool(),
		ServerName:   "localhost",
		Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Leaf.Raw}, PrivateKey: key}},
	})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func TestCertificateFromMeshpilotsCA(t *testing.T) {
	authority, addr := meshCA(t)
	client := New(Options{Conn: provenConn(t, authority, addr, webID), TTL: 2 * time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	got, err := client.Certificate(ctx, Request{Identity: webID})
	if err != nil {
		t.Fatal(err)
	}
	if got.Identity != webID || got.Leaf.URIs[0].String() != webID {
		t.Errorf("certificate for %s names %v", got.Identity, got.Leaf.URIs)
	}
	if _, err := got.Leaf.Verify(x509.VerifyOptions{Roots: authority.RootPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("the leaf does not chain to the mesh root: %v", err)
	}
	if string(got.RootPEM) != string(authority.RootPEM()) {
		t.Errorf("root sent %q, want the CA's root", got.RootPEM)
	}
	if lifetime := got.NotAfter().Sub(got.Leaf.NotBefore); lifetime < 2*time.Hour || lifetime > 2*time.Hour+10*time.Minute {
		t.Errorf("lifetime %s, asked for 2h", lifetime)
	}
	// The pair works as a TLS certificate.
	if _, err := tls.X509KeyPair(
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: got.TLS.Certificate[0]}), keyPEM(t, got.TLS.PrivateKey.(*ecdsa.PrivateKey))); err != nil {
		t.Errorf("key and leaf do not pair: %v", err)
	}

	refusals := []struct {
		name string
		req  Request
		code codes.Code
	}{
		{"another workload's identity", Request{Identity: "spiffe://cluster.local/ns/app/sa/db"}, codes.InvalidArgument},
		{"impersonation by a caller the CA does not trust", Request{Identity: "spiffe://cluster.local/ns/app/sa/db", Impersonate: true}, codes.PermissionDenied},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client.Certificate(ctx, tc.req)
			if status.Code(errorsUnwrap(err)) != tc.code {
				t.Errorf("got %v, want %s", err, tc.code)
			}
		})
	}
}

func errorsUnwrap(err error) error {
	for err != nil {
		if _, ok := status.FromError(err); ok {
			return err
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
	return err
}

func keyPEM(t *testing.T, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func TestRequestChecks(t *testing.T) {
	client := New(Options{Conn: nil})
	for _, id := range []string{"", "web", "https://cluster.local/ns/app/sa/web", "spiffe:///ns/app/sa/web"} {
		if _, err := client.Certificate(context.Background(), Request{Identity: id}); err == nil || !strings.Contains(err.Error(), "not a SPIFFE identity") {
			t.Errorf("identity %q: %v, want a refusal before any call", id, err)
		}
	}
}

// A CA answer that does not fit the request is refused, never used.
func TestAssembleRefusesBadAnswers(t *testing.T) {
	authority, err := ca.NewSelfSigned(ca.Options{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	sign := func(k *ecdsa.PrivateKey, identity string) string {
		u, _ := url.Parse(identity)
		csr, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, k)
		id, _ := ca.ParseIdentity(identity)
		c, err := authority.Sign(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr}), id, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return c.ChainPEM[0]
	}
	root := string(authority.RootPEM())
	otherCA, err := ca.NewSelfSigned(ca.Options{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	// A leaf of explicit validity, as no CA of ours would issue it.
	testRoot, testRootPEM, testRootKey := selfSignedRoot(t)
	now := time.Now()
	leafValid := func(notBefore, notAfter time.Time) string {
		return leafPEM(t, testRoot, testRootKey, &key.PublicKey, webID, notBefore, notAfter)
	}
	cases := []struct {
		name string
		pems []string
		want string
	}{
		{"no root", []string{sign(key, webID)}, "want the leaf and the root"},
		{"not PEM", []string{"junk", root}, "not a PEM certificate"},
		{"another identity", []string{sign(key, "spiffe://cluster.local/ns/app/sa/db"), root}, "not " + webID},
		{"another key", []string{sign(other, webID), root}, "does not certify the key"},
		{"expired", []string{leafValid(now.Add(-2*time.Hour), now.Add(-time.Hour)), testRootPEM}, "not now"},
		{"not valid yet", []string{leafValid(now.Add(time.Hour), now.Add(2*time.Hour)), testRootPEM}, "not now"},
		{"root of another CA", []string{sign(key, webID), string(otherCA.RootPEM())}, "does not chain up to the root"},
		{"root not PEM", []string{sign(key, webID), "junk"}, "root that is not a PEM certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := assemble(webID, key, tc.pems); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
	for _, good := range [][]string{
		{sign(key, webID), root},
		{leafValid(now.Add(-time.Hour), now.Add(time.Hour)), testRootPEM},
	} {
		if got, err := assemble(webID, key, good); err != nil || got.Identity != webID {
			t.Errorf("a good answer: %v", err)
		}
	}
}

// selfSignedRoot is a CA certificate with its PEM and key.
func selfSignedRoot(t *testing.T) (*x509.Certificate, string, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test root"},
		NotBefore: time.Now().Add(-24 * time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), key
}

// leafPEM is a workload leaf for pub and identity, of the given validity,
// signed by root.
func leafPEM(t *testing.T, root *x509.Certificate, rootKey *ecdsa.PrivateKey, pub *ecdsa.PublicKey, identity string, notBefore, notAfter time.Time) string {
	t.Helper()
	u, _ := url.Parse(identity)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), NotBefore: notBefore, NotAfter: notAfter, URIs: []*url.URL{u},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root, pub, rootKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/istio-token"
	read := TokenFile(path)
	if _, err := read(context.Background()); err == nil {
		t.Error("a missing token file gave a token")
	}
	for _, tc := range []struct{ content, want string }{{"abc\n", "abc"}, {"  def  ", "def"}} {
		if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		md, err := BearerToken(read).GetRequestMetadata(context.Background())
		if err != nil || md["authorization"] != "Bearer "+tc.want {
			t.Errorf("%q: %v, %v", tc.content, md, err)
		}
	}
	if err := os.WriteFile(path, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := BearerToken(read).GetRequestMetadata(context.Background()); err == nil {
		t.Error("an empty token file gave a token")
	}
	if !BearerToken(read).RequireTransportSecurity() {
		t.Error("a token may be sent without TLS")
	}
}
