package testcerts

import (
	"crypto/x509"
	"testing"
)

func TestCAIssue(t *testing.T) {
	ca := NewCA(t, "cluster.local")
	other := NewCA(t, "cluster.local")
	cases := []struct {
		name     string
		id       string
		wantURIs int
	}{
		{name: "workload", id: "spiffe://cluster.local/ns/default/sa/a", wantURIs: 1},
		{name: "no identity", id: "", wantURIs: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cert := ca.Issue(t, tc.id)
			leaf := cert.Leaf
			if len(leaf.URIs) != tc.wantURIs || (tc.wantURIs == 1 && leaf.URIs[0].String() != tc.id) {
				t.Errorf("URIs = %v, want %q", leaf.URIs, tc.id)
			}
			// A workload certificate serves and dials: both uses verify.
			for _, use := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
				if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool, KeyUsages: []x509.ExtKeyUsage{use}}); err != nil {
					t.Errorf("verify for %v: %v", use, err)
				}
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: other.Pool}); err == nil {
				t.Errorf("verified against another root")
			}
		})
	}
}
