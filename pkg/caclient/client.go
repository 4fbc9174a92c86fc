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
	"errors"
	"fmt"
	"net/url"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
	pb "istio.io/api/security/v1alpha1"
)

// impersonatedIdentityKey is where, in the request's own metadata (not
// gRPC metadata), a trusted node proxy names the workload it asks for, as
// Istio's ztunnel does.
const impersonatedIdentityKey = "ImpersonatedIdentity"

// Options configure a Client.
type Options struct {
	// Conn reaches the CA (15012, over TLS that trusts the mesh root).
	Conn grpc.ClientConnInterface
	// Token returns the caller's ServiceAccount token (audience istio-ca),
	// sent as a bearer token, only over a secure Conn (a call over a
	// plaintext one fails); nil sends none, for a caller that proves
	// itself with the client certificate of Conn.
	Token func(ctx context.Context) (string, error)
	// TTL is the lifetime asked for; 0 leaves it to the CA (24 h by
	// default).
	TTL time.Duration
}

// Client asks the CA for certificates. It is safe for concurrent use.
type Client struct {
	opts Options
	ca   pb.IstioCertificateServiceClient
}

// New returns a client of the CA behind opts.Conn.
func New(opts Options) *Client {
	return &Client{opts: opts, ca: pb.NewIstioCertificateServiceClient(opts.Conn)}
}

// Certificate is a key pair for one workload identity, with what the CA
// sent around it.
type Certificate struct {
	// Identity is the certificate's SPIFFE identity.
	Identity string
	// TLS is the key and the chain (leaf first, then intermediates), ready
	// for tls.Config.Certificates.
	TLS tls.Certificate
	// Leaf is the parsed leaf.
	Leaf *x509.Certificate
	// RootPEM is the mesh root the CA sent last in the chain.
	RootPEM []byte
}

// NotAfter is when the certificate expires.
func (c *Certificate) NotAfter() time.Time { return c.Leaf.NotAfter }

// Request says which certificate to ask for.
type Request struct {
	// Identity is the SPIFFE identity the certificate must name:
	// spiffe://<trust domain>/ns/<namespace>/sa/<service account>. The CA
	// signs only an identity the caller proves (or may impersonate).
	Identity string
	// Impersonate asks for Identity on behalf of a workload on the
	// caller's node; only callers the CA trusts as node proxies may.
	Impersonate bool
}

// Certificate makes a new ECDSA P-256 key and asks the CA to certify it.
func (c *Client) Certificate(ctx context.Context, req Request) (*Certificate, error) {
	id, err := url.Parse(req.Identity)
	if err != nil || id.Scheme != "spiffe" || id.Host == "" {
		return nil, fmt.Errorf("caclient: %q is not a SPIFFE identity", req.Identity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("caclient: key: %w", err)
	}
	csrDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{Organization: []string{id.Host}},
		URIs:    []*url.URL{id},
	}, key)
	if err != nil {
		return nil, fmt.Errorf("caclient: CSR: %w", err)
	}
	msg := &pb.IstioCertificateRequest{
		Csr:              string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csrDER})),
		ValidityDuration: int64(c.opts.TTL / time.Second),
	}
	if req.Impersonate {
		msg.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{
			impersonatedIdentityKey: structpb.NewStringValue(req.Identity),
		}}
	}
	var callOpts []grpc.CallOption
	if c.opts.Token != nil {
		// As per-RPC credentials, not plain metadata: they require
		// transport security, so grpc-go refuses to send the token over a
		// plaintext connection rather than send it in the clear.
		callOpts = append(callOpts, grpc.PerRPCCredentials(BearerToken(c.opts.Token)))
	}
	resp, err := c.ca.CreateCertificate(ctx, msg, callOpts...)
	if err != nil {
		return nil, fmt.Errorf("caclient: certificate for %s: %w", req.Identity, err)
	}
	return assemble(req.Identity, key, resp.GetCertChain())
}

// assemble checks the CA's answer: PEM certificates, the leaf first and
// the root last, the leaf naming the identity asked for, holding key,
// valid now and chaining up to the root sent with it.
func assemble(identity string, key *ecdsa.PrivateKey, pems []string) (*Certificate, error) {
	if len(pems) < 2 {
		return nil, fmt.Errorf("caclient: the CA sent %d certificates, want the leaf and the root at least", len(pems))
	}
	var chain [][]byte
	for _, p := range pems[:len(pems)-1] {
		block, _ := pem.Decode([]byte(p))
		if block == nil || block.Type != "CERTIFICATE" {
			return nil, errors.New("caclient: the CA sent a chain element that is not a PEM certificate")
		}
		chain = append(chain, block.Bytes)
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		return nil, fmt.Errorf("caclient: leaf: %w", err)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != identity {
		return nil, fmt.Errorf("caclient: the CA certified %v, not %s", leaf.URIs, identity)
	}
	if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, errors.New("caclient: the leaf does not certify the key sent")
	}
	if err := verifyChain(leaf, chain[1:], []byte(pems[len(pems)-1])); err != nil {
		return nil, err
	}
	return &Certificate{
		Identity: identity,
		TLS:      tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf},
		Leaf:     leaf,
		RootPEM:  []byte(pems[len(pems)-1]),
	}, nil
}

// verifyChain refuses a leaf that is not valid now, or that does not chain
// up to rootPEM through the intermediates sent with it. Such a certificate
// would only fail later, in every handshake of its holder, far from the
// cause; refused here, the caller retries and the reason is in its error.
func verifyChain(leaf *x509.Certificate, intermediates [][]byte, rootPEM []byte) error {
	now := time.Now()
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return fmt.Errorf("caclient: the CA sent a certificate valid from %s to %s, not now",
			leaf.NotBefore.Format(time.RFC3339), leaf.NotAfter.Format(time.RFC3339))
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rootPEM) {
		return errors.New("caclient: the CA sent a root that is not a PEM certificate")
	}
	inter := x509.NewCertPool()
	for _, der := range intermediates {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("caclient: intermediate: %w", err)
		}
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}); err != nil {
		return fmt.Errorf("caclient: the certificate does not chain up to the root the CA sent: %w", err)
	}
	return nil
}
