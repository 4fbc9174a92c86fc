package webhook

import (
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fakeClock is a settable clock for certificate lifetimes.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// parsePEMCerts returns every certificate in a PEM bundle.
func parsePEMCerts(t testing.TB, bundle []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, bundle = pem.Decode(bundle)
		if block == nil {
			return out
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("bad certificate in bundle: %v", err)
		}
		out = append(out, cert)
	}
}

// verifyServing checks that leaf chains to a CA in bundle for the given
// name (a DNS name or IP) at the given time.
func verifyServing(leaf *x509.Certificate, bundle []byte, name string, at time.Time) error {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(bundle)
	_, err := leaf.Verify(x509.VerifyOptions{
		DNSName:     name,
		Roots:       roots,
		CurrentTime: at,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	return err
}
