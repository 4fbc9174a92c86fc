package webhook

import (
	"crypto/x509"
	"io"
	"log/slog"
	"time"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

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
