package ca

import (
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
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

// settleTime is how long a certificate of the CA Secrets must have been
// valid before the CA signs with it. A leaf begins no earlier than its
// chain, so a chain that began a moment ago is refused by every peer whose
// clock lags behind the CA's: the margin is the one the CA backdates what
// it issues by.
const settleTime = clockSkew

// settledAuthority is what s holds once its certificates have been valid
// for settleTime: s is read as of settleTime before now, so that a
// certificate that began since is held back as if it were not valid yet,
// and what is kept must not have expired by now. settleAt is when the
// next certificate of s settles (zero when all have).
func settledAuthority(opts Options, s *corev1.Secret, now time.Time) (a *Authority, settleAt time.Time, err error) {
	settleAt = nextSettling(s, now)
	if a, err = authorityFromSecret(opts, s, now.Add(-settleTime)); err != nil {
		return nil, settleAt, err
	}
	for _, c := range a.signingPath() {
		if now.After(c.NotAfter) {
			return nil, settleAt, fmt.Errorf("CA Secret %s/%s: %q expired at %s", s.Namespace, s.Name, c.Subject.String(), c.NotAfter.Format(time.RFC3339))
		}
	}
	return a, settleAt, nil
}

// nextSettling is when the first certificate of s that has not settled by
// now settles; zero when all have.
func nextSettling(s *corev1.Secret, now time.Time) time.Time {
	next := nextNotBefore(s, now.Add(-settleTime))
	if next.IsZero() {
		return next
	}
	return next.Add(settleTime)
}

// startingAuthority is what a starting CA signs with from s: its settled
// material, or, when that is not usable (a CA plugged in a moment ago),
// what is valid now, since a CA with nothing to sign with serves no one.
func startingAuthority(opts Options, s *corev1.Secret, now time.Time) (*Authority, error) {
	if a, _, err := settledAuthority(opts, s, now); err == nil {
		return a, nil
	}
	return authorityFromSecret(opts, s, now)
}
