package ca

import (
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// ErrCANotValid is why Sign (an ErrCertGen) and ServingCertificate refuse
// when a certificate of the CA's own chain has expired or is not valid
// yet. Loading checks the chain once, but a CA keeps running for months;
// without this check it would go on issuing certificates that are already
// expired, or that no peer can verify, and count them as successes.
var ErrCANotValid = errors.New("the CA's certificate chain is not valid now")

// signingPath is every certificate a leaf's validity depends on: the
// signing certificate, the chain handed out with each leaf, and the root
// the signing certificate chains up to (the signer itself when self-signed).
func (a *Authority) signingPath() []*x509.Certificate {
	path := make([]*x509.Certificate, 0, 2+len(a.chain))
	path = append(path, a.cert)
	path = append(path, a.chain...)
	return append(path, a.signerRoot)
}

// leafValidity is the NotBefore and NotAfter of a leaf issued at now for
// ttl: backdated by clockSkew, and never outside any certificate of the
// signing path, because a peer rejects a chain as soon as any element of it
// has expired, and the holder would believe it had more time than it has.
// It refuses, with ErrCertGen wrapping ErrCANotValid, when a certificate of
// the path is not valid at now.
func (a *Authority) leafValidity(now time.Time, ttl time.Duration) (notBefore, notAfter time.Time, err error) {
	notBefore, notAfter = now.Add(-clockSkew), now.Add(ttl)
	for _, c := range a.signingPath() {
		if err := outsideValidity(c, now); err != nil {
			return time.Time{}, time.Time{}, signErr(ErrCertGen, "%w: %w; replace the CA's key material", ErrCANotValid, err)
		}
		if c.NotBefore.After(notBefore) {
			notBefore = c.NotBefore
		}
		if c.NotAfter.Before(notAfter) {
			notAfter = c.NotAfter
		}
	}
	return notBefore, notAfter, nil
}

// outsideValidity names c and says how it is not valid at now; nil when it
// is.
func outsideValidity(c *x509.Certificate, now time.Time) error {
	switch {
	case now.After(c.NotAfter):
		return fmt.Errorf("%q expired at %s", c.Subject.String(), c.NotAfter.Format(time.RFC3339))
	case now.Before(c.NotBefore):
		return fmt.Errorf("%q is not valid before %s", c.Subject.String(), c.NotBefore.Format(time.RFC3339))
	}
	return nil
}

// firstExpiry is the earliest NotAfter of certs.
func firstExpiry(certs []*x509.Certificate) time.Time {
	t := certs[0].NotAfter
	for _, c := range certs[1:] {
		if c.NotAfter.Before(t) {
			t = c.NotAfter
		}
	}
	return t
}
