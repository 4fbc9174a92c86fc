package bootstrap

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/pkg/ca"
)

// TestServingCertificateRotatesWithoutRestart: the 15012 certificate names
// the istiod Service, chains to the mesh root, and is replaced at 80% of
// its lifetime while the same tls.Config keeps serving — handshakes after
// the renewal get the new one.
func TestServingCertificateRotatesWithoutRestart(t *testing.T) {
	authority, err := ca.NewSelfSigned(ca.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.Webhook.Namespace, opts.Revision = "mesh-system", "canary"
	opts.CA.ServingCertTTL = 3 * time.Second
	x := &secureXDS{opts: opts, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		service: (&Server{opts: opts}).istiodService()}

	start := time.Now()
	renewAt, err := x.renew(authority)
	if err != nil {
		t.Fatal(err)
	}
	first := x.cert.Load().Leaf
	want := []string{"istiod-canary", "istiod-canary.mesh-system", "istiod-canary.mesh-system.svc", "istiod-canary.mesh-system.svc.cluster.local"}
	if !slices.Equal(first.DNSNames, want) {
		t.Errorf("DNS names %v, want %v", first.DNSNames, want)
	}
	if _, err := first.Verify(x509.VerifyOptions{Roots: authority.RootPool(), DNSName: "istiod-canary.mesh-system.svc",
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the serving certificate does not verify against the mesh root: %v", err)
	}
	// NotAfter has whole seconds (X.509 time), so 80% is of what is left
	// of the certificate's real lifetime, not of the TTL asked for.
	life := first.NotAfter.Sub(start)
	if want := start.Add(life * 8 / 10); renewAt.Sub(want).Abs() > 100*time.Millisecond {
		t.Errorf("renewal %v after issuance, want about 80%% of the %v lifetime", renewAt.Sub(start), life)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go x.keepRenewing(ctx, authority, renewAt)
	cfg := &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return x.cert.Load(), nil }}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := cfg.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Leaf.Equal(first) {
			if time.Now().After(first.NotAfter) {
				t.Errorf("renewed only after the old certificate expired")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the serving certificate was never renewed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
