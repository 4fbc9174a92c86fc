package ca

import (
	"context"
	"crypto"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	pb "istio.io/api/security/v1alpha1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshpilot/meshpilot/internal/kubetest"
)

// caFixture is a CA served over a real TLS listener on 127.0.0.1.
type caFixture struct {
	env     *kubetest.Env
	ca      *Authority
	metrics *Metrics
	addr    string
}

func startCA(t *testing.T, trusted []types.NamespacedName) *caFixture {
	t.Helper()
	env := kubetest.StartWithoutCRDs(t)
	ctx := context.Background()
	a, err := LoadOrCreate(ctx, env.Kube, Options{Namespace: env.Namespace(t, "ca-system")})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(prometheus.NewRegistry())
	srv, err := NewServer(ServerOptions{
		Authority:      a,
		Authenticators: []Authenticator{NewTokenAuthenticator(env.Kube, TokenOptions{}), NewCertAuthenticator(a)},
		NodeAuthorizer: NewNodeAuthorizer(env.Kube, trusted),
		Metrics:        m,
	})
	if err != nil {
		t.Fatal(err)
	}
	serving, err := a.ServingCertificate([]string{"istiod.istio-system.svc"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{*serving},
		// Requested, not required: the first certificate is got with a
		// token; renewals present the previous one.
		ClientAuth: tls.VerifyClientCertIfGiven,
		ClientCAs:  a.RootPool(),
		MinVersion: tls.VersionTLS12,
	})))
	srv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(g.Stop)
	return &caFixture{env: env, ca: a, metrics: m, addr: lis.Addr().String()}
}

// client dials the CA, trusting its root, presenting clientCert if any.
func (f *caFixture) client(t *testing.T, clientCert *tls.Certificate) pb.IstioCertificateServiceClient {
	t.Helper()
	cfg := &tls.Config{RootCAs: f.ca.RootPool(), ServerName: "istiod.istio-system.svc", MinVersion: tls.VersionTLS12}
	if clientCert != nil {
		cfg.Certificates = []tls.Certificate{*clientCert}
	}
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewIstioCertificateServiceClient(conn)
}

// bearerCtx is an outgoing context carrying tok as a bearer token (none
// when tok is empty). The RPC timeouts come from the test's deadline.
func bearerCtx(tok string) context.Context {
	ctx := context.Background()
	if tok == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

// leafOf checks the response's shape (leaf first, root last, as istiod)
// and returns the leaf.
func leafOf(t *testing.T, f *caFixture, resp *pb.IstioCertificateResponse) *x509.Certificate {
	t.Helper()
	chain := resp.GetCertChain()
	if len(chain) != 2 {
		t.Fatalf("cert_chain has %d elements, want [leaf, root]", len(chain))
	}
	if chain[len(chain)-1] != string(f.ca.RootPEM()) {
		t.Error("the last element is not the root")
	}
	certs, err := parseCertificates([]byte(chain[0]))
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

func TestCreateCertificateOverTLS(t *testing.T) {
	t.Parallel()
	f := startCA(t, nil)
	ns := f.env.Namespace(t, "workload")
	createSA(t, f.env, ns, "app")
	tok := token(t, f.env, ns, "app", []string{"istio-ca"}, nil)
	want := Identity{TrustDomain: "cluster.local", Namespace: ns, ServiceAccount: "app"}
	key := ecKey(t, elliptic.P256())
	c := f.client(t, nil)

	resp, err := c.CreateCertificate(bearerCtx(tok), &pb.IstioCertificateRequest{
		Csr: string(csrFor(t, key, []string{want.String()})), ValidityDuration: 3600,
	})
	if err != nil {
		t.Fatal(err)
	}
	leaf := leafOf(t, f, resp)
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != want.String() {
		t.Fatalf("leaf for %v, want %s", leaf.URIs, want)
	}
	if got := time.Until(leaf.NotAfter); got > time.Hour || got < 58*time.Minute {
		t.Errorf("lifetime %s, want the 1h asked for", got)
	}

	t.Run("renewal by client certificate, without a token", func(t *testing.T) {
		cc := &tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
		resp, err := f.client(t, cc).CreateCertificate(bearerCtx(""), &pb.IstioCertificateRequest{
			Csr: string(csrFor(t, ecKey(t, elliptic.P256()), []string{want.String()})),
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := leafOf(t, f, resp); got.URIs[0].String() != want.String() {
			t.Errorf("renewed for %s, want %s", got.URIs[0], want)
		}
	})

	refusals := []struct {
		name string
		ctx  context.Context
		req  *pb.IstioCertificateRequest
		code codes.Code
		msg  string
	}{
		{"no credential at all", bearerCtx(""), &pb.IstioCertificateRequest{Csr: string(csrFor(t, key, nil))},
			codes.Unauthenticated, "token: none presented; certificate: none presented"},
		{"token for another audience", bearerCtx(token(t, f.env, ns, "app", []string{"other"}, nil)),
			&pb.IstioCertificateRequest{Csr: string(csrFor(t, key, nil))}, codes.Unauthenticated, "not valid for audience"},
		{"malformed CSR", bearerCtx(tok), &pb.IstioCertificateRequest{Csr: "junk"}, codes.InvalidArgument, "not PEM"},
		{"oversized CSR", bearerCtx(tok), &pb.IstioCertificateRequest{Csr: strings.Repeat("a", MaxCSRBytes+1)}, codes.InvalidArgument, "limit"},
		{"CSR for another identity", bearerCtx(tok), &pb.IstioCertificateRequest{
			Csr: string(csrFor(t, key, []string{"spiffe://cluster.local/ns/kube-system/sa/admin"}))}, codes.InvalidArgument, "asks for identity"},
		{"weak key", bearerCtx(tok), &pb.IstioCertificateRequest{Csr: string(csrFor(t, rsaKey(t, 1024), nil))}, codes.InvalidArgument, "too weak"},
		{"TTL above max", bearerCtx(tok), &pb.IstioCertificateRequest{
			Csr: string(csrFor(t, key, nil)), ValidityDuration: int64((DefaultMaxCertTTL + time.Hour) / time.Second)}, codes.InvalidArgument, "max allowed TTL"},
		{"impersonation by an untrusted caller", bearerCtx(tok), &pb.IstioCertificateRequest{
			Csr: string(csrFor(t, key, nil)), Metadata: impersonate("spiffe://cluster.local/ns/" + ns + "/sa/other")},
			codes.PermissionDenied, "not a trusted node account"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.CreateCertificate(tc.ctx, tc.req)
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.msg) {
				t.Fatalf("got %v, want %s saying %q", err, tc.code, tc.msg)
			}
		})
	}

	t.Run("metrics", func(t *testing.T) {
		for _, m := range []struct {
			name string
			c    prometheus.Collector
			want float64
		}{
			{"csr_count", f.metrics.CSRs, float64(2 + len(refusals))},
			{"success", f.metrics.Success, 2},
			{"authentication_failure", f.metrics.AuthnFailures, 2},
			{"csr_parsing_err", f.metrics.CSRParseErrors, 4},
			{"sign_err CSR_ERROR", f.metrics.SignErrors.WithLabelValues("CSR_ERROR"), 4},
			{"sign_err TTL_ERROR", f.metrics.SignErrors.WithLabelValues("TTL_ERROR"), 1},
			{"authorization_failure", f.metrics.AuthzFailures, 1},
		} {
			if got := testutil.ToFloat64(m.c); got != m.want {
				t.Errorf("%s = %v, want %v", m.name, got, m.want)
			}
		}
		if got := testutil.ToFloat64(f.metrics.RootExpiry); got != float64(f.ca.RootExpiry().Unix()) {
			t.Errorf("root expiry gauge %v", got)
		}
	})
}

func TestCertAuthenticatorRefusesForeignCertificate(t *testing.T) {
	// A listener that only requests client certificates (no verification)
	// must still not turn a self-made certificate into an identity.
	a := mustSelfSigned(t, Options{})
	other := mustSelfSigned(t, Options{})
	key := ecKey(t, elliptic.P256())
	foreign, err := other.Sign(csrFor(t, key, nil), testID, 0)
	if err != nil {
		t.Fatal(err)
	}
	srvCert, err := a.ServingCertificate([]string{"ca.test"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ServerOptions{Authority: a, Authenticators: []Authenticator{NewCertAuthenticator(a)}})
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{*srvCert}, ClientAuth: tls.RequireAnyClientCert,
	})))
	srv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis) //nolint:errcheck
	defer g.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: a.RootPool(), ServerName: "ca.test",
		Certificates: []tls.Certificate{{Certificate: [][]byte{foreign.Leaf.Raw}, PrivateKey: crypto.Signer(key)}},
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = pb.NewIstioCertificateServiceClient(conn).CreateCertificate(bearerCtx(""),
		&pb.IstioCertificateRequest{Csr: string(csrFor(t, key, nil))})
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "not issued by this CA") {
		t.Fatalf("got %v, want Unauthenticated: not issued by this CA", err)
	}
}

func impersonate(id string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{ImpersonatedIdentityKey: structpb.NewStringValue(id)}}
}
