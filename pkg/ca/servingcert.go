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

// servingRetry is the wait after a failed issuance.
const servingRetry = time.Minute

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
	// and NotAfter may be capped by the signing certificate's own expiry.
	life := cert.Leaf.NotAfter.Sub(issued)
	renewAt = issued.Add(time.Duration(float64(life) * ServingRenewFraction))
	r.log.Info("serving certificate issued", "names", r.opts.Names, "notAfter", cert.Leaf.NotAfter, "renewAt", renewAt)
	return renewAt, nil
}

// Run issues the first certificate unless Issue already did, then keeps it
// current until ctx ends. A failed issuance is logged and retried; the
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
		next, err := r.Issue()
		if err != nil {
			r.log.Error("serving certificate not issued; retrying", "error", err, "in", servingRetry)
			next = time.Now().Add(servingRetry)
		}
		renewAt = next
	}
}
