package ca

import (
	"bytes"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSignRefusals(t *testing.T) {
	a := mustSelfSigned(t, Options{})
	good := csrFor(t, ecKey(t, elliptic.P256()), []string{testID.String()})

	tampered := func() []byte {
		block, _ := pem.Decode(good)
		der := bytes.Clone(block.Bytes)
		der[len(der)-3] ^= 0xff // inside the signature
		return pem.EncodeToMemory(&pem.Block{Type: block.Type, Bytes: der})
	}()
	oversized := append(bytes.Repeat([]byte("#"), MaxCSRBytes), good...)

	tests := []struct {
		name string
		csr  []byte
		id   Identity
		ttl  time.Duration
		kind *SignErrorKind
		want string // in the message
	}{
		{"empty", nil, testID, 0, ErrCSR, "empty"},
		{"not PEM", []byte("hello"), testID, 0, ErrCSR, "not PEM"},
		{"wrong PEM type", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2}}), testID, 0, ErrCSR, `"CERTIFICATE"`},
		{"garbage DER", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte{1, 2, 3}}), testID, 0, ErrCSR, "cannot be parsed"},
		{"oversized", oversized, testID, 0, ErrCSR, "more than the limit"},
		{"bad signature", tampered, testID, 0, ErrCSR, "signature"},
		{"RSA 1024", csrFor(t, rsaKey(t, 1024), []string{testID.String()}), testID, 0, ErrCSR, "too weak"},
		{"EC P-224", csrFor(t, ecKey(t, elliptic.P224()), []string{testID.String()}), testID, 0, ErrCSR, "P-224"},
		{"EC P-521", csrFor(t, ecKey(t, elliptic.P521()), []string{testID.String()}), testID, 0, ErrCSR, "P-521"},
		{"SAN of another identity", csrFor(t, ecKey(t, elliptic.P256()), []string{"spiffe://cluster.local/ns/default/sa/other"}), testID, 0, ErrCSR, "asks for identity"},
		{"SAN of another trust domain", csrFor(t, ecKey(t, elliptic.P256()), []string{"spiffe://evil.example/ns/default/sa/app"}), testID, 0, ErrCSR, "asks for identity"},
		{"own SAN plus another", csrFor(t, ecKey(t, elliptic.P256()), []string{testID.String(), "spiffe://cluster.local/ns/kube-system/sa/admin"}), testID, 0, ErrCSR, "asks for identity"},
		{"DNS SAN", csrFor(t, ecKey(t, elliptic.P256()), []string{testID.String()}, "kubernetes.default.svc"), testID, 0, ErrCSR, "only the SPIFFE identity"},
		{"identity of another trust domain", good, Identity{TrustDomain: "other.td", Namespace: "default", ServiceAccount: "app"}, 0, ErrCSR, "trust domain"},
		{"TTL above max", good, testID, DefaultMaxCertTTL + time.Second, ErrTTL, "greater than the max"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cert, err := a.Sign(tc.csr, tc.id, tc.ttl)
			if err == nil {
				t.Fatalf("signed %v, want a refusal", cert.Leaf.URIs)
			}
			if !errors.Is(err, tc.kind) {
				t.Errorf("error kind: got %v, want %s", err, tc.kind.Label)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestSignIssues(t *testing.T) {
	a := mustSelfSigned(t, Options{})
	tests := []struct {
		name    string
		csr     []byte
		ttl     time.Duration
		wantTTL time.Duration
	}{
		{"EC P-256, default TTL", csrFor(t, ecKey(t, elliptic.P256()), []string{testID.String()}), 0, DefaultCertTTL},
		{"EC P-384, 1h", csrFor(t, ecKey(t, elliptic.P384()), []string{testID.String()}), time.Hour, time.Hour},
		{"RSA 2048, max TTL", csrFor(t, rsaKey(t, 2048), []string{testID.String()}), DefaultMaxCertTTL, DefaultMaxCertTTL},
		// istio-agent and ztunnel put the SAN in; a CSR without any name is
		// fine too, since the identity comes from the proof.
		{"no SAN in the CSR", csrFor(t, ecKey(t, elliptic.P256()), nil), 0, DefaultCertTTL},
		{"negative TTL means default", csrFor(t, ecKey(t, elliptic.P256()), nil), -time.Hour, DefaultCertTTL},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			cert, err := a.Sign(tc.csr, testID, tc.ttl)
			if err != nil {
				t.Fatal(err)
			}
			leaf := cert.Leaf
			if len(leaf.URIs) != 1 || leaf.URIs[0].String() != testID.String() {
				t.Errorf("URI SANs %v, want exactly %s", leaf.URIs, testID)
			}
			if len(leaf.DNSNames)+len(leaf.IPAddresses)+len(leaf.EmailAddresses) != 0 {
				t.Errorf("leaf has other SANs: %v %v %v", leaf.DNSNames, leaf.IPAddresses, leaf.EmailAddresses)
			}
			if leaf.IsCA {
				t.Error("leaf is a CA")
			}
			if got := leaf.NotAfter.Sub(start); got < tc.wantTTL-time.Minute || got > tc.wantTTL+time.Minute {
				t.Errorf("lifetime %s, want %s", got, tc.wantTTL)
			}
			if len(cert.ChainPEM) != 1 {
				t.Errorf("self-signed CA: chain has %d elements, want the leaf alone", len(cert.ChainPEM))
			}
			for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth} {
				if _, err := leaf.Verify(x509.VerifyOptions{Roots: a.RootPool(), KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
					t.Errorf("verify for usage %v: %v", usage, err)
				}
			}
		})
	}
}

func TestSignWithPluggedCA(t *testing.T) {
	p := newPluggedCA(t)
	a, err := NewFromPEM(Options{}, p.caCert, p.caKey, p.certChain, p.rootCert)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.RootPEM(), p.rootCert) {
		t.Error("RootPEM is not root-cert.pem")
	}
	cert, err := a.Sign(csrFor(t, ecKey(t, elliptic.P256()), []string{testID.String()}), testID, 0)
	if err != nil {
		t.Fatal(err)
	}
	// leaf, intermediate; the root of cert-chain.pem is not repeated.
	if len(cert.ChainPEM) != 2 || cert.ChainPEM[1] != string(p.caCert) {
		t.Fatalf("chain = %d elements, want leaf + intermediate", len(cert.ChainPEM))
	}
	if !bytes.Equal(cert.Leaf.RawIssuer, p.inter.RawSubject) {
		t.Error("the leaf is not signed by the intermediate")
	}
	inter := x509.NewCertPool()
	inter.AddCert(p.inter)
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: a.RootPool(), Intermediates: inter}); err != nil {
		t.Error(err)
	}
}

func TestNewFromPEMRefusals(t *testing.T) {
	p := newPluggedCA(t)
	other := newPluggedCA(t)
	leafKey := ecKey(t, elliptic.P256())
	notCA := func() []byte {
		a := mustSelfSigned(t, Options{})
		c, err := a.Sign(csrFor(t, leafKey, nil), testID, 0)
		if err != nil {
			t.Fatal(err)
		}
		return []byte(c.ChainPEM[0])
	}()
	weakKey := rsaKey(t, 1024)
	_, weakCert := caCert(t, "weak", weakKey, nil, nil)
	// Blocks pem.Decode skips as text rather than decodes: left in a
	// file, they would pass unseen.
	indentedKey := regexp.MustCompile(`(?m)^`).ReplaceAll(p.caKey, []byte("  "))
	mismatchedKey := bytes.Replace(p.caKey, []byte("END PRIVATE KEY"), []byte("END EC PRIVATE KEY"), 1)
	brokenRoot := bytes.Replace(other.rootCert, []byte("\n"), []byte("\n!"), 1)

	tests := []struct {
		name                           string
		caCert, caKey, chain, rootCert []byte
		want                           string
	}{
		{"no key", p.caCert, nil, p.certChain, p.rootCert, "both required"},
		{"key of another CA", p.caCert, other.caKey, p.certChain, p.rootCert, "does not hold the private key"},
		{"garbage key", p.caCert, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), p.certChain, p.rootCert, "ca-key.pem"},
		{"weak key", weakCert, keyPEM(t, weakKey), nil, nil, "too weak"},
		{"not a CA", notCA, keyPEM(t, leafKey), nil, nil, "may not sign"},
		{"root of another CA", p.caCert, p.caKey, nil, other.rootCert, "does not chain up"},
		{"intermediate without root", p.caCert, p.caKey, nil, nil, "root-cert.pem is required"},
		{"key in the root file", p.caCert, p.caKey, p.certChain, p.caKey, "root-cert.pem"},
		{"key beside the root", p.caCert, p.caKey, p.certChain, slices.Concat(p.rootCert, p.caKey), `type "PRIVATE KEY"`},
		{"indented key beside the root", p.caCert, p.caKey, p.certChain, slices.Concat(p.rootCert, indentedKey), "root-cert.pem: 1 of 2 PEM blocks"},
		{"key with a wrong END line beside the root", p.caCert, p.caKey, p.certChain, slices.Concat(mismatchedKey, p.rootCert), "root-cert.pem: 1 of 2 PEM blocks"},
		// In a rotation the file holds two roots; losing one would break
		// every workload that still holds a certificate from it.
		{"a broken root beside a good one", p.caCert, p.caKey, p.certChain, slices.Concat(brokenRoot, p.rootCert), "root-cert.pem: 1 of 2 PEM blocks"},
		{"a broken intermediate in the chain", p.caCert, p.caKey, slices.Concat(p.certChain, brokenRoot), p.rootCert, "cert-chain.pem: 1 of 3 PEM blocks"},
		{"comments only in the root file", p.caCert, p.caKey, p.certChain, []byte("# the root goes here\n"), "root-cert.pem: no certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewFromPEM(Options{}, tc.caCert, tc.caKey, tc.chain, tc.rootCert)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			for _, k := range [][]byte{tc.caKey, p.caKey} {
				if body := keyBody(k); body != "" && strings.Contains(err.Error(), body) {
					t.Errorf("error quotes key material: %v", err)
				}
			}
		})
	}
}

func TestParseIdentity(t *testing.T) {
	tests := []struct {
		in   string
		want Identity
		ok   bool
	}{
		{"spiffe://cluster.local/ns/default/sa/app", testID, true},
		{"spiffe://td/ns/a/sa/b/extra", Identity{}, false},
		{"spiffe://td/ns//sa/b", Identity{}, false},
		{"spiffe://td/ns/a/sa/b?x=y", Identity{}, false},
		{"spiffe://td/namespace/a/sa/b", Identity{}, false},
		{"https://td/ns/a/sa/b", Identity{}, false},
		{"", Identity{}, false},
	}
	for _, tc := range tests {
		got, err := ParseIdentity(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseIdentity(%q) = %v, %v", tc.in, got, err)
		}
	}
}

// BenchmarkSign measures certificates signed per second, by the CSR's key
// type, with our ECDSA P-256 root and, for comparison, with an RSA 2048 root
// like istiod's default.
func BenchmarkSign(b *testing.B) {
	rsaRootKey := rsaKey(b, 2048)
	_, rsaRootPEM := caCert(b, "rsa root", rsaRootKey, nil, nil)
	rsaRoot, err := NewFromPEM(Options{}, rsaRootPEM, keyPEM(b, rsaRootKey), nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	roots := []struct {
		name string
		a    *Authority
	}{{"root=ECDSA-P256", mustSelfSigned(b, Options{})}, {"root=RSA-2048", rsaRoot}}
	csrs := []struct {
		name string
		csr  []byte
	}{
		{"csr=ECDSA-P256", csrFor(b, ecKey(b, elliptic.P256()), []string{testID.String()})},
		{"csr=RSA-2048", csrFor(b, rsaKey(b, 2048), []string{testID.String()})},
	}
	for _, root := range roots {
		for _, c := range csrs {
			b.Run(root.name+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := root.a.Sign(c.csr, testID, 0); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "certs/s")
			})
		}
	}
}

// keyBody is the first base64 line of a PEM key, to look for in messages.
func keyBody(pemKey []byte) string {
	lines := strings.Split(string(pemKey), "\n")
	if len(lines) < 2 {
		return ""
	}
	return lines[1]
}

func TestParseNodeAccounts(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want int
		ok   bool
	}{
		{[]string{"istio-system/ztunnel"}, 1, true},
		{[]string{" istio-system/ztunnel ", "", "kube-system/node"}, 2, true},
		{[]string{"ztunnel"}, 0, false},
		{[]string{"/ztunnel"}, 0, false},
		{[]string{"istio-system/"}, 0, false},
		{[]string{"a/b/c"}, 0, false},
	} {
		got, err := ParseNodeAccounts(tc.in)
		if (err == nil) != tc.ok || len(got) != tc.want {
			t.Errorf("ParseNodeAccounts(%q) = %v, %v", tc.in, got, err)
		}
	}
}
