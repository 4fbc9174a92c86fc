package ca

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// ServingRenewFraction is how far into its lifetime a serving certificate
// is replaced: early enough that a failed renewal has a fifth of the
// lifetime left for retries, late enough not to churn.
const ServingRenewFraction = 0.8

// After a failed issuance the first retry comes soon, as a passing
// failure heals quickly; the wait then doubles up to servingRetryMax, so a
// CA that stays unusable (its chain expired) costs an attempt every few
// minutes, not one a second. New key material (Changed) retries at once.
const (
	servingRetryMin = time.Second
	servingRetryMax = 5 * time.Minute
)

// servingRetry is the wait after the n-th failed issuance in a row.
func servingRetry(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	if n > 30 { // far past the cap; the shift would overflow
		return servingRetryMax
	}
	return min(servingRetryMin<<(n-1), servingRetryMax)
}

// ServingCertOptions configure a RotatingServingCert.
type ServingCertOptions struct {
	// Authority signs; a Keeper, so that a new root reaches the listener.
	Authority AuthorityProvider
	// Changed signals that Authority holds new key material (see
	// Keeper.Subscribe); the certificate is then issued again at once.
	// Nil for a fixed Authority.
	Changed <-chan struct{}
	// Names are the DNS names and IP literals the certificate carries.
	Names []string
	// TTL ≤ 0 means the Authority's default certificate lifetime.
	TTL time.Duration
	// Listener names the listener in logs and in the expiry metric.
	Listener string
	Metrics  *Metrics
	Logger   *slog.Logger
}

// RotatingServingCert is the serving certificate of one of the control
// plane's TLS listeners (15012, the webhooks). Its GetCertificate fits
// tls.Config, so every handshake gets the current certificate, and Run
// replaces it at ServingRenewFraction of its lifetime and whenever the
// root changes, without a restart.
type RotatingServingCert struct {
	opts ServingCertOptions
	log  *slog.Logger
	cert atomic.Pointer[tls.Certificate]

	// The failures in a row and the last one's reason; Run's alone.
	failures int
	failing  string
}

func NewRotatingServingCert(opts ServingCertOptions) (*RotatingServingCert, error) {
	if opts.Authority == nil {
		return nil, errors.New("ca: ServingCertOptions.Authority is required")
	}
	if len(opts.Names) == 0 {
		return nil, errors.New("ca: a serving certificate needs at least one name")
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &RotatingServingCert{opts: opts, log: opts.Logger.With("listener", opts.Listener)}, nil
}

// GetCertificate returns the current certificate, or an error before the
// first one is issued (the handshake then fails, and the client retries).
func (r *RotatingServingCert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := r.cert.Load(); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("the %s serving certificate is not issued yet", r.opts.Listener)
}

// Issue signs a new certificate with the current Authority, puts it in
// use, and says when to replace it.
func (r *RotatingServingCert) Issue() (renewAt time.Time, err error) {
	authority := r.opts.Authority.Current()
	if authority == nil {
		return time.Time{}, fmt.Errorf("%s serving certificate: the CA is not loaded yet", r.opts.Listener)
	}
	issued := time.Now()
	cert, err := authority.ServingCertificate(r.opts.Names, r.opts.TTL)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s serving certificate: %w", r.opts.Listener, err)
	}
	r.cert.Store(cert)
	r.opts.Metrics.ServingCertExpiry.WithLabelValues(r.opts.Listener).Set(unixSeconds(cert.Leaf.NotAfter))
	// The lifetime is measured from now, not from the backdated NotBefore,
	// and NotAfter may be capped by the first expiry of the CA's chain.
	life := cert.Leaf.NotAfter.Sub(issued)
	renewAt = issued.Add(time.Duration(float64(life) * ServingRenewFraction))
	r.log.Info("serving certificate issued", "names", r.opts.Names, "notAfter", cert.Leaf.NotAfter, "renewAt", renewAt)
	return renewAt, nil
}

// Run issues the first certificate unless Issue already did, then keeps it
// current until ctx ends. A failed issuance is retried (see renew); the
// certificate in use stays until then.
func (r *RotatingServingCert) Run(ctx context.Context) {
	var renewAt time.Time // zero: issue now
	if c := r.cert.Load(); c != nil {
		life := time.Until(c.Leaf.NotAfter)
		renewAt = time.Now().Add(time.Duration(float64(life) * ServingRenewFraction))
	}
	for {
		// At least a second apart, so a certificate capped by a nearly
		// expired CA cannot turn this into a busy loop.
		timer := time.NewTimer(max(time.Until(renewAt), time.Second))
		if renewAt.IsZero() {
			timer.Reset(0)
		}
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-r.opts.Changed:
			timer.Stop()
			r.log.Info("the CA's key material changed; issuing a new serving certificate")
		case <-timer.C:
		}
		renewAt = r.renew()
	}
}

// renew issues a certificate and says when to try next: at its renewal
// time, or servingRetry after a failure. Every failure is counted, but
// logged only when issuance starts failing or fails for another reason,
// and the recovery is logged: an expired CA would otherwise repeat the
// same error for as long as it stays expired.
func (r *RotatingServingCert) renew() time.Time {
	next, err := r.Issue()
	if err == nil {
		if r.failures > 0 {
			r.log.Info("serving certificate issued again", "failedAttempts", r.failures)
			r.failures, r.failing = 0, ""
		}
		return next
	}
	r.failures++
	r.opts.Metrics.ServingCertFailures.WithLabelValues(r.opts.Listener).Inc()
	wait := servingRetry(r.failures)
	if reason := err.Error(); reason != r.failing {
		r.failing = reason
		r.log.Error("serving certificate not issued; retrying with backoff, and at once when the CA's key material changes",
			"error", err, "in", wait)
	} else {
		r.log.Debug("serving certificate still not issued", "error", err, "failedAttempts", r.failures, "in", wait)
	}
	return time.Now().Add(wait)
}
