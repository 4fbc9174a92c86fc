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
// cert, through certificates of offered (cert-chain.pem's, and those of
// ca-cert.pem after the signing certificate), to one of roots, each valid
// at now. Only that path is handed out with each leaf and bounds its
// lifetime. A certificate off it (an intermediate renewed and
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

// offPathCert is a certificate the CA ignores, with the file that held it.
type offPathCert struct {
	file string
	cert *x509.Certificate
}

// offPath is what of offered (the certificates of file) is neither on path
// nor one of the roots (which are published anyway): certificates the CA
// ignores, which the operator may believe it relies on.
func offPath(file string, offered, path, roots []*x509.Certificate) []offPathCert {
	var off []offPathCert
	for _, c := range offered {
		if !slices.ContainsFunc(path, c.Equal) && !slices.ContainsFunc(roots, c.Equal) {
			off = append(off, offPathCert{file: file, cert: c})
		}
	}
	return off
}

// warnOffPath names each certificate a ignores. Call it once per set of
// files loaded, not at every reading of unchanged ones: a warning repeated
// at each event of the CA Secrets would bury the news of a new one.
func (a *Authority) warnOffPath(log *slog.Logger) {
	for _, o := range a.offPath {
		c := o.cert
		// notBefore tells a renewed intermediate added ahead of time,
		// which the Keeper takes up at that moment, from a stray.
		log.Warn("a certificate of "+o.file+" is not on the path from the signing certificate to the root: it is ignored",
			"subject", c.Subject.String(), "issuer", c.Issuer.String(), "serial", c.SerialNumber.Text(16),
			"notBefore", c.NotBefore.Format(time.RFC3339), "notAfter", c.NotAfter.Format(time.RFC3339))
	}
}

// sameFiles says whether b was loaded from the same key material as a,
// down to the certificates a ignores, so that their warning is not
// repeated when b is read again from unchanged Secrets.
func (a *Authority) sameFiles(b *Authority) bool {
	return a.sameKeyMaterial(b) && slices.EqualFunc(a.offPath, b.offPath, func(x, y offPathCert) bool {
		return x.file == y.file && x.cert.Equal(y.cert)
	})
}
