package hbone

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// ALPN is the only application protocol an HBONE endpoint negotiates.
const ALPN = "h2"

// SpiffeID returns the one spiffe:// URI SAN of a workload certificate. A
// certificate with none, or with several, names no single workload and is
// refused.
func SpiffeID(cert *x509.Certificate) (string, error) {
	id := ""
	for _, u := range cert.URIs {
		if u.Scheme != "spiffe" {
			continue
		}
		if id != "" {
			return "", errors.New("certificate has more than one SPIFFE ID")
		}
		id = u.String()
	}
	if id == "" {
		return "", errors.New("certificate has no SPIFFE ID")
	}
	return id, nil
}

// errNoRoots refuses a peer when the mesh roots are missing: nil roots
// would mean the system pool to crypto/tls and x509, trusting every public
// CA.
var errNoRoots = errors.New("no mesh roots to verify the peer against")

// verifyPeer checks a peer's chain against the mesh roots for the given use
// and returns its SPIFFE ID. SPIFFE certificates carry no DNS names, so
// crypto/tls's own hostname check cannot be used on the client side; this
// replaces it.
func verifyPeer(cs tls.ConnectionState, roots *x509.CertPool, usage x509.ExtKeyUsage) (string, error) {
	if len(cs.PeerCertificates) == 0 {
		return "", errors.New("peer sent no certificate")
	}
	if roots == nil {
		return "", errNoRoots
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	leaf := cs.PeerCertificates[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return "", fmt.Errorf("peer certificate: %w", err)
	}
	return SpiffeID(leaf)
}

// certIdentity is the SPIFFE ID of our own certificate, used to key the
// connection pool.
func certIdentity(c *tls.Certificate) (string, error) {
	leaf := c.Leaf
	if leaf == nil {
		if len(c.Certificate) == 0 {
			return "", errors.New("client certificate is empty")
		}
		var err error
		if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return "", err
		}
	}
	return SpiffeID(leaf)
}
