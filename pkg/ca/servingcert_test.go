package ca

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// handshake connects to l with a client that trusts only roots and names
// serverName, and returns the certificate chain the server presented.
func handshake(t *testing.T, l net.Listener, roots *x509.CertPool, serverName string) []*x509.Certificate {
	t.Helper()
	conn, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: roots, ServerName: serverName})
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates
}

// serveTLS accepts on a loopback listener with cfg and completes each
// handshake, until the test ends.
func serveTLS(t *testing.T, cfg *tls.Config) net.Listener {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	return l
}

// TestRotatingServingCertRenewsWithoutRestart: the certificate names what
// it was asked to (DNS names and IPs), chains to the mesh root, and is
// replaced at 80% of its lifetime while the same listener keeps serving —
// handshakes after the renewal get the new one, before the old expired.
func TestRotatingServingCertRenewsWithoutRestart(t *testing.T) {
	authority := mustSelfSigned(t, Options{})
	metrics := NewMetrics(nil)
	names := []string{"istiod-canary", "istiod-canary.mesh-system", "istiod-canary.mesh-system.svc", "istiod-canary.mesh-system.svc.cluster.local", "127.0.0.1"}
	r, err := NewRotatingServingCert(ServingCertOptions{
		// Renewal comes at 80% of the lifetime, so a lifetime of 6 s leaves
		// over a second between the renewal and the expiry for the
		// handshakes below to see the new certificate on a loaded machine.
		Authority: authority, Names: names, TTL: 6 * time.Second, Listener: "webhook", Metrics: metrics, Logger: discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.GetCertificate(nil); err == nil {
		t.Error("GetCertificate answered before a certificate was issued")
	}
	start := time.Now()
	renewAt, err := r.Issue()
	if err != nil {
		t.Fatal(err)
	}
	first, _ := r.GetCertificate(nil)
	if want := names[:4]; !slices.Equal(first.Leaf.DNSNames, want) {
		t.Errorf("DNS names %v, want %v", first.Leaf.DNSNames, want)
	}
	if len(first.Leaf.IPAddresses) != 1 || !first.Leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) {
		t.Errorf("IP SANs %v, want [127.0.0.1]", first.Leaf.IPAddresses)
	}
	if got, want := testutil.ToFloat64(metrics.ServingCertExpiry.WithLabelValues("webhook")), float64(first.Leaf.NotAfter.Unix()); got != want {
		t.Errorf("serving cert expiry gauge %v, want %v", got, want)
	}
	// NotAfter has whole seconds (X.509 time), so 80% is of the real
	// lifetime from issuance, not of the TTL asked for.
	life := first.Leaf.NotAfter.Sub(start)
	if want := start.Add(life * 8 / 10); renewAt.Sub(want).Abs() > 100*time.Millisecond {
		t.Errorf("renewal %v after issuance, want about 80%% of the %v lifetime", renewAt.Sub(start), life)
	}

	l := serveTLS(t, &tls.Config{GetCertificate: r.GetCertificate})
	served := handshake(t, l, authority.RootPool(), "istiod-canary.mesh-system.svc")
	if !served[0].Equal(first.Leaf) {
		t.Fatal("the listener did not serve the issued certificate")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := handshake(t, l, authority.RootPool(), "127.0.0.1")[0]
		if !got.Equal(first.Leaf) {
			if time.Now().After(first.Leaf.NotAfter) {
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

// TestRotatingServingCertFollowsANewRoot: when the Authority announces new
// key material, the certificate is issued again at once by the new signer,
// long before its renewal time, and verifies only against the new root.
func TestRotatingServingCertFollowsANewRoot(t *testing.T) {
	old, plugged := mustSelfSigned(t, Options{}), newPluggedCA(t)
	next, err := NewFromPEM(Options{}, plugged.caCert, plugged.caKey, plugged.certChain, plugged.rootCert)
	if err != nil {
		t.Fatal(err)
	}
	var current providerFunc = func() *Authority { return old }
	changed := make(chan struct{}, 1)
	r, err := NewRotatingServingCert(ServingCertOptions{
		Authority: &current, Changed: changed, Names: []string{"istiod.istio-system.svc"}, Listener: "xds-tls", Logger: discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Issue(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)

	current = func() *Authority { return next }
	changed <- struct{}{}
	deadline := time.Now().Add(10 * time.Second)
	for {
		cert, _ := r.GetCertificate(nil)
		if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: next.RootPool(), Intermediates: poolOf(cert),
			DNSName: "istiod.istio-system.svc"}); err == nil {
			// The plugged-in CA signs through an intermediate: the chain
			// served must carry it, or clients holding only the root fail.
			if len(cert.Certificate) != 2 {
				t.Errorf("served chain has %d certificates, want leaf and intermediate", len(cert.Certificate))
			}
			if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: old.RootPool()}); err == nil {
				t.Error("the new certificate still verifies against the old root")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the serving certificate was not reissued by the new CA")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNewRotatingServingCertErrors(t *testing.T) {
	a := mustSelfSigned(t, Options{})
	for _, tc := range []struct {
		name string
		opts ServingCertOptions
		want string
	}{
		{"no authority", ServingCertOptions{Names: []string{"istiod"}}, "Authority is required"},
		{"no names", ServingCertOptions{Authority: a}, "at least one name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewRotatingServingCert(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	var unloaded providerFunc = func() *Authority { return nil }
	r, err := NewRotatingServingCert(ServingCertOptions{Authority: &unloaded, Names: []string{"istiod"}, Listener: "webhook"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Issue(); err == nil || !strings.Contains(err.Error(), "not loaded yet") {
		t.Errorf("Issue before the CA is loaded: %v, want a 'not loaded yet' error", err)
	}
}

// providerFunc is an AuthorityProvider whose answer the test swaps.
type providerFunc func() *Authority

func (p *providerFunc) Current() *Authority { return (*p)() }

func poolOf(c *tls.Certificate) *x509.CertPool {
	pool := x509.NewCertPool()
	for _, der := range c.Certificate[1:] {
		if cert, err := x509.ParseCertificate(der); err == nil {
			pool.AddCert(cert)
		}
	}
	return pool
}
