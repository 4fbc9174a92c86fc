package ca

import (
	"bytes"
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
	"strconv"
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

// validity is a certificate's NotBefore and NotAfter.
type validity struct{ notBefore, notAfter time.Time }

// aYear is valid from an hour ago for a year: a CA certificate nobody
// worries about.
func aYear() validity {
	return validity{time.Now().Add(-time.Hour), time.Now().Add(365 * 24 * time.Hour)}
}

// caCert makes a CA certificate for key, valid for aYear, signed by parent
// (self-signed when parent is nil), and returns it with its PEM.
func caCert(t testing.TB, name string, key crypto.Signer, parent *x509.Certificate, parentKey crypto.Signer) (*x509.Certificate, []byte) {
	t.Helper()
	return caCertValid(t, name, key, parent, parentKey, aYear())
}

// caCertValid is caCert with an explicit validity.
func caCertValid(t testing.TB, name string, key crypto.Signer, parent *x509.Certificate, parentKey crypto.Signer, v validity) (*x509.Certificate, []byte) {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             v.notBefore,
		NotAfter:              v.notAfter,
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
	return newCAChain(t, aYear(), aYear())
}

// newCAChain makes a chain of CA certificates, one per validity, root
// first and signer last, in the plug-in layout: cert-chain.pem holds the
// signer, the intermediates, then the root. With a single validity the
// signer is the root; inter is always the signer.
func newCAChain(t testing.TB, v ...validity) pluggedCA {
	t.Helper()
	var (
		parent    *x509.Certificate
		parentKey crypto.Signer
		p         pluggedCA
		chain     [][]byte
	)
	for i, valid := range v {
		key := ecKey(t, elliptic.P256())
		name := "plugged intermediate " + strconv.Itoa(i)
		if i == 0 {
			name = "plugged root"
		}
		c, pemBytes := caCertValid(t, name, key, parent, parentKey, valid)
		if i == 0 {
			p.root, p.rootCert = c, pemBytes
		}
		p.inter, p.caCert, p.caKey = c, pemBytes, keyPEM(t, key)
		chain = append([][]byte{pemBytes}, chain...)
		parent, parentKey = c, key
	}
	p.certChain = bytes.Join(chain, nil)
	return p
}

// loadedAt loads p as a CA that was valid at the moment at, as a running
// CA whose certificates expire later (or start later) than its loading.
func loadedAt(t testing.TB, at time.Time, p pluggedCA) *Authority {
	t.Helper()
	a, err := newAuthority(Options{}.withDefaults(), SourcePlugged, p.caCert, p.caKey, p.certChain, p.rootCert, at)
	if err != nil {
		t.Fatal(err)
	}
	return a
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
