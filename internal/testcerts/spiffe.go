package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/url"
	"testing"
	"time"
)

// CA is a throwaway mesh root that issues SPIFFE workload certificates, the
// way the mesh CA does: one URI SAN, usable for both client and server auth
// (a workload certificate serves inbound tunnels and dials outbound ones).
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// Pool holds only this root, for RootCAs or ClientCAs.
	Pool *x509.CertPool
}

// NewCA makes a fresh self-signed root named after the trust domain.
func NewCA(t testing.TB, trustDomain string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(t),
		Subject:               pkix.Name{Organization: []string{trustDomain}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(23 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, key: key, Pool: pool}
}

// Issue returns a leaf for the SPIFFE ID (for example
// "spiffe://cluster.local/ns/default/sa/a"), with Leaf filled in. An empty
// ID makes a leaf with no URI SAN, which a mesh peer must refuse.
func (ca *CA) Issue(t testing.TB, spiffeID string) tls.Certificate {
	t.Helper()
	var uris []*url.URL
	if spiffeID != "" {
		u, err := url.Parse(spiffeID)
		if err != nil {
			t.Fatal(err)
		}
		uris = append(uris, u)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(t),
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(23 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         uris,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

func randomSerial(t testing.TB) *big.Int {
	t.Helper()
	// Random serials keep two certificates for the same identity distinct.
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return serial
}
