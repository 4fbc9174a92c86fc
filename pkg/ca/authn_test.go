package ca

import (
	"context"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/big"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// issueRaw signs tmpl with a's key, for certificates Sign would never make.
func issueRaw(t *testing.T, a *Authority, tmpl *x509.Certificate) *x509.Certificate {
	t.Helper()
	key := ecKey(t, elliptic.P256())
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.signer)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func tlsPeer(certs ...*x509.Certificate) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{
		Addr:     &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1},
		AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: certs}},
	})
}

func TestCertAuthenticator(t *testing.T) {
	a := mustSelfSigned(t, Options{})
	other := mustSelfSigned(t, Options{})
	issued, err := a.Sign(csrFor(t, ecKey(t, elliptic.P256()), nil), testID, 0)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.Sign(csrFor(t, ecKey(t, elliptic.P256()), nil), testID, 0)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := a.ServingCertificate([]string{"istiod.istio-system.svc"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	clientTmpl := func(uris ...string) *x509.Certificate {
		c := &x509.Certificate{NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		for _, u := range uris {
			parsed, _ := url.Parse(u)
			c.URIs = append(c.URIs, parsed)
		}
		return c
	}
	expired := clientTmpl(testID.String())
	expired.NotBefore, expired.NotAfter = now.Add(-2*time.Hour), now.Add(-time.Hour)

	tests := []struct {
		name   string
		ctx    context.Context
		err    error  // errors.Is, when not nil
		msg    string // in the error, when not empty
		wantID bool
	}{
		{"certificate this CA issued", tlsPeer(issued.Leaf), nil, "", true},
		{"no peer", context.Background(), ErrNoCredential, "", false},
		{"TLS without a client certificate", tlsPeer(), ErrNoCredential, "", false},
		{"certificate of another CA", tlsPeer(foreign.Leaf), nil, "not issued by this CA", false},
		{"expired", tlsPeer(issueRaw(t, a, expired)), nil, "expired", false},
		{"server-auth only (the CA's serving certificate)", tlsPeer(serving.Leaf), nil, "not issued by this CA", false},
		{"no URI SAN", tlsPeer(issueRaw(t, a, clientTmpl())), ErrNoIdentity, "0 URI SANs", false},
		{"two URI SANs", tlsPeer(issueRaw(t, a, clientTmpl(testID.String(), "spiffe://cluster.local/ns/x/sa/y"))), ErrNoIdentity, "2 URI SANs", false},
		{"URI not an Istio identity", tlsPeer(issueRaw(t, a, clientTmpl("spiffe://cluster.local/workload"))), ErrNoIdentity, "", false},
		{"identity of another trust domain", tlsPeer(issueRaw(t, a, clientTmpl("spiffe://other.td/ns/default/sa/app"))), ErrNoIdentity, "trust domain", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewCertAuthenticator(a).Authenticate(tc.ctx)
			if tc.wantID {
				if err != nil || c.Identity != testID {
					t.Fatalf("got %v, %v; want %s", c, err, testID)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted as %s", c.Identity)
			}
			if tc.err != nil && !errors.Is(err, tc.err) {
				t.Errorf("error %v is not %v", err, tc.err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not say %q", err, tc.msg)
			}
		})
	}
}
