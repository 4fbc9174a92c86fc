package testcerts

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"slices"
	"testing"
	"time"
)

func TestSelfSigned(t *testing.T) {
	cases := []struct {
		name    string
		names   []string
		wantCN  string
		wantDNS []string
		wantIPs []string
	}{
		{name: "dns", names: []string{"web.example.com", "*.wild.example.com"}, wantCN: "web.example.com", wantDNS: []string{"web.example.com", "*.wild.example.com"}},
		{name: "ip first", names: []string{"127.0.0.1", "localhost", "::1"}, wantCN: "127.0.0.1", wantDNS: []string{"localhost"}, wantIPs: []string{"127.0.0.1", "::1"}},
		{name: "no names"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			certPEM, keyPEM := SelfSigned(t, tc.names...)
			block, _ := pem.Decode(certPEM)
			if block == nil || block.Type != "CERTIFICATE" {
				t.Fatalf("certificate PEM = %q", certPEM)
			}
			leaf, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok {
				t.Errorf("public key is %T, want ECDSA", leaf.PublicKey)
			}
			if leaf.Subject.CommonName != tc.wantCN {
				t.Errorf("CN = %q, want %q", leaf.Subject.CommonName, tc.wantCN)
			}
			if !slices.Equal(leaf.DNSNames, tc.wantDNS) {
				t.Errorf("DNS names = %q, want %q", leaf.DNSNames, tc.wantDNS)
			}
			var ips []string
			for _, ip := range leaf.IPAddresses {
				ips = append(ips, ip.String())
			}
			if !slices.Equal(ips, tc.wantIPs) {
				t.Errorf("IPs = %q, want %q", ips, tc.wantIPs)
			}
			if now := time.Now(); now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
				t.Errorf("valid %v..%v, not now", leaf.NotBefore, leaf.NotAfter)
			}
			kb, _ := pem.Decode(keyPEM)
			if kb == nil {
				t.Fatalf("key PEM = %q", keyPEM)
			}
			if _, err := x509.ParsePKCS8PrivateKey(kb.Bytes); err != nil {
				t.Errorf("key: %v", err)
			}
		})
	}
}

func TestTLSVerifiesAgainstItsBundle(t *testing.T) {
	cert, bundle := TLS(t, "127.0.0.1", "localhost")
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		t.Fatal("bundle holds no certificate")
	}
	for _, host := range []string{"127.0.0.1", "localhost"} {
		if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("verify for %s: %v", host, err)
		}
	}
	_, other := TLS(t, "127.0.0.1")
	others := x509.NewCertPool()
	others.AppendCertsFromPEM(other)
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: others, DNSName: "127.0.0.1"}); err == nil {
		t.Error("verified against another certificate's bundle")
	}
}
