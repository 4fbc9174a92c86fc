package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/url"
	"testing"
	"time"
)

func ecKey(t testing.TB, c elliptic.Curve) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func rsaKey(t testing.TB, bits int) crypto.Signer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// csrFor builds a PEM CSR signed by key, asking for the given URI SANs and
// DNS names.
func csrFor(t testing.TB, key crypto.Signer, uris []string, dns ...string) []byte {
	t.Helper()
	tmpl := &x509.CertificateRequest{DNSNames: dns}
	for _, u := range uris {
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// caCert makes a CA certificate for key, signed by parent (self-signed when
// parent is nil), and returns it with its PEM.
func caCert(t testing.TB, name string, key crypto.Signer, parent *x509.Certificate, parentKey crypto.Signer) (*x509.Certificate, []byte) {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, encodeCertificate(c)
}

func keyPEM(t testing.TB, k crypto.Signer) []byte {
	t.Helper()
	b, err := encodePrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pluggedCA is Istio's plug-in layout: root → intermediate (the signer),
// with cert-chain.pem = intermediate + root, as Istio's tools write it.
type pluggedCA struct {
	root, inter                        *x509.Certificate
	caCert, caKey, certChain, rootCert []byte
}

func newPluggedCA(t testing.TB) pluggedCA {
	t.Helper()
	rootKey := ecKey(t, elliptic.P256())
	root, rootPEM := caCert(t, "plugged root", rootKey, nil, nil)
	interKey := ecKey(t, elliptic.P256())
	inter, interPEM := caCert(t, "plugged intermediate", interKey, root, rootKey)
	return pluggedCA{
		root: root, inter: inter,
		caCert: interPEM, caKey: keyPEM(t, interKey),
		certChain: append(append([]byte{}, interPEM...), rootPEM...), rootCert: rootPEM,
	}
}

func mustSelfSigned(t testing.TB, opts Options) *Authority {
	t.Helper()
	a, err := NewSelfSigned(opts)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

var testID = Identity{TrustDomain: "cluster.local", Namespace: "default", ServiceAccount: "app"}
