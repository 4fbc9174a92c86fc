package ca

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// pathToRoot is the path along which peers verify this CA's leaves: from
// cert, through certificates of offered (cert-chain.pem), to one of roots,
// each valid at now. Only that path is handed out with each leaf and
// bounds its lifetime. A certificate off it (an intermediate renewed and
// left beside its successor, another CA's certificate, a root that
// root-cert.pem does not hold) is needed by no peer, so it must not cut
// every leaf short, nor stop all signing once it expires.
//
// Of several paths (an intermediate renewed before it expired, both copies
// still valid), it takes the one that stays valid longest: leaves are cut
// short the least, and signing goes on as long as any path allows.
func pathToRoot(cert *x509.Certificate, offered []*x509.Certificate, roots *x509.CertPool, now time.Time) ([]*x509.Certificate, error) {
	inter := x509.NewCertPool()
	for _, c := range offered {
		inter.AddCert(c)
	}
	paths, err := cert.Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if err != nil {
		// Go's error gives the dates but not the certificate; the operator
		// needs its name to know what to replace.
		var invalid x509.CertificateInvalidError
		if errors.As(err, &invalid) && invalid.Reason == x509.Expired {
			err = outsideValidity(invalid.Cert, now)
		}
		return nil, fmt.Errorf("%s does not chain up to %s: %w", CACertKey, RootCertKey, err)
	}
	return slices.MaxFunc(paths, func(a, b []*x509.Certificate) int {
		return firstExpiry(a).Compare(firstExpiry(b))
	}), nil
}

// warnOffPath logs each certificate of cert-chain.pem that is neither on
// path nor one of the roots (which are published anyway): the operator
// may believe the CA relies on it.
func warnOffPath(log *slog.Logger, offered, path, roots []*x509.Certificate) {
	for _, c := range offered {
		if slices.ContainsFunc(path, c.Equal) || slices.ContainsFunc(roots, c.Equal) {
			continue
		}
		log.Warn("a certificate of "+CertChainKey+" is not on the path from "+CACertKey+" to the root: it is ignored",
			"subject", c.Subject.String(), "issuer", c.Issuer.String(), "serial", c.SerialNumber.Text(16),
			"notAfter", c.NotAfter.Format(time.RFC3339))
	}
}
