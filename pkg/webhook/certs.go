package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	admissionlisters "k8s.io/client-go/listers/admissionregistration/v1"
	"k8s.io/client-go/util/workqueue"
)

const (
	// DefaultCASecretName is the Secret that holds the webhook CA.
	DefaultCASecretName = "meshpilot-webhook-ca"

	defaultCAValidity    = 365 * 24 * time.Hour
	defaultCertValidity  = 30 * 24 * time.Hour
	defaultCheckInterval = time.Minute
	// firstRetryInterval is how soon a failed first load is retried; the
	// wait doubles up to the check interval.
	firstRetryInterval = time.Second
)

// CertOptions configure a CertManager.
type CertOptions struct {
	// Client is the Kubernetes API. With it the CA lives in a Secret and
	// the caBundle is patched into the webhook configurations; without it
	// the CA lives only in memory (local runs and tests).
	Client kubernetes.Interface
	// Namespace holds the CA Secret and the Service.
	Namespace string
	// SecretName defaults to DefaultCASecretName.
	SecretName string
	// ServiceName is the webhook Service; the serving certificate names it
	// (see ServiceDNSNames). Defaults to ServiceNameFor(Revision).
	ServiceName string
	// Revision selects the MutatingWebhookConfigurations to patch: those
	// labelled istio.io/rev=Revision ("default" when empty).
	Revision string
	// ValidatorName is the ValidatingWebhookConfiguration to patch;
	// defaults to ValidatorConfigName(Revision, Namespace).
	ValidatorName string
	// ExtraDNSNames and ExtraIPs are added to the serving certificate's
	// SANs, e.g. 127.0.0.1 when the API server calls a local URL.
	ExtraDNSNames []string
	ExtraIPs      []net.IP
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics defaults to unregistered metrics.
	Metrics *Metrics
	// Now is the clock, for tests; defaults to time.Now.
	Now func() time.Time
	// CAValidity (default one year) and CertValidity (default 30 days) are
	// the lifetimes of the CA and of each serving certificate.
	CAValidity   time.Duration
	CertValidity time.Duration
	// RotateBefore is how long before its expiry the serving certificate
	// is replaced (default a third of CertValidity); CARotateBefore is the
	// same for the CA (default a third of CAValidity).
	RotateBefore   time.Duration
	CARotateBefore time.Duration
	// CheckInterval is how often expiry and the Secret are checked;
	// default one minute.
	CheckInterval time.Duration
}

// ServiceNameFor is the control plane's Service for a revision: istiod, or
// istiod-REV.
func ServiceNameFor(revision string) string {
	if revision == "" {
		return "istiod"
	}
	return "istiod-" + revision
}

// ValidatorConfigName is the ValidatingWebhookConfiguration of a revision
// installed in namespace: istio-validator[-REV]-NAMESPACE.
func ValidatorConfigName(revision, namespace string) string {
	if revision == "" {
		return "istio-validator-" + namespace
	}
	return "istio-validator-" + revision + "-" + namespace
}

// RevisionLabelValue is the istio.io/rev value of a revision's objects.
func RevisionLabelValue(revision string) string {
	if revision == "" {
		return "default"
	}
	return revision
}

// CertManager owns the webhook serving certificate: it keeps the CA, issues
// and rotates the certificate, and (with a client) keeps the caBundle of
// the webhook configurations current. GetCertificate is safe to call from
// any goroutine.
type CertManager struct {
	opts     CertOptions
	log      *slog.Logger
	metrics  *Metrics
	dnsNames []string
	ips      []net.IP
	static   bool

	// mu serialises CA refreshes and issuance.
	mu sync.Mutex
	ca *authority
	// previousCA is the CA that was replaced, in PEM, still trusted until
	// it expires so that replicas still serving its certificates work.
	previousCA []byte

	serving   atomic.Pointer[tls.Certificate]
	bundle    atomic.Pointer[[]byte]
	ready     chan struct{}
	readyOnce sync.Once
	started   atomic.Bool

	// Set by Run when there is a client.
	queue      workqueue.TypedRateLimitingInterface[configKey]
	mutating   admissionlisters.MutatingWebhookConfigurationLister
	validating admissionlisters.ValidatingWebhookConfigurationLister
	listersSet atomic.Bool
}

// NewCertManager checks the options and fills in defaults. Nothing is
// created until Init or Run.
func NewCertManager(opts CertOptions) (*CertManager, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.SecretName == "" {
		opts.SecretName = DefaultCASecretName
	}
	if opts.CAValidity <= 0 {
		opts.CAValidity = defaultCAValidity
	}
	if opts.CertValidity <= 0 {
		opts.CertValidity = defaultCertValidity
	}
	if opts.RotateBefore <= 0 {
		opts.RotateBefore = opts.CertValidity / 3
	}
	if opts.CARotateBefore <= 0 {
		opts.CARotateBefore = opts.CAValidity / 3
	}
	if opts.CheckInterval <= 0 {
		opts.CheckInterval = defaultCheckInterval
	}
	if opts.RotateBefore >= opts.CertValidity {
		return nil, fmt.Errorf("webhook certs: RotateBefore (%v) must be shorter than CertValidity (%v)", opts.RotateBefore, opts.CertValidity)
	}
	if opts.CARotateBefore >= opts.CAValidity {
		return nil, fmt.Errorf("webhook certs: CARotateBefore (%v) must be shorter than CAValidity (%v)", opts.CARotateBefore, opts.CAValidity)
	}
	if opts.Client != nil {
		if opts.Namespace == "" {
			return nil, errors.New("webhook certs: Namespace is required with a Kubernetes client")
		}
		if opts.ServiceName == "" {
			opts.ServiceName = ServiceNameFor(opts.Revision)
		}
		if opts.ValidatorName == "" {
			opts.ValidatorName = ValidatorConfigName(opts.Revision, opts.Namespace)
		}
	}
	var dnsNames []string
	if opts.ServiceName != "" {
		if opts.Namespace == "" {
			return nil, errors.New("webhook certs: ServiceName needs a Namespace")
		}
		dnsNames = ServiceDNSNames(opts.ServiceName, opts.Namespace)
	}
	dnsNames = append(dnsNames, opts.ExtraDNSNames...)
	if len(dnsNames) == 0 && len(opts.ExtraIPs) == 0 {
		return nil, errors.New("webhook certs: no names for the serving certificate (set ServiceName, ExtraDNSNames or ExtraIPs)")
	}
	return &CertManager{
		opts:     opts,
		log:      opts.Logger.With("component", "webhook-certs"),
		metrics:  opts.Metrics,
		dnsNames: dnsNames,
		ips:      opts.ExtraIPs,
		ready:    make(chan struct{}),
	}, nil
}

// NewStaticCertManager serves a fixed certificate and key (PEM) and manages
// nothing: no CA, no rotation, no caBundle. For local runs with a
// certificate made elsewhere.
func NewStaticCertManager(certPEM, keyPEM []byte) (*CertManager, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("webhook certs: %w", err)
	}
	m := &CertManager{static: true, ready: make(chan struct{}), log: slog.Default(), metrics: NewMetrics(nil)}
	m.serving.Store(&pair)
	close(m.ready)
	return m, nil
}

// GetCertificate returns the current serving certificate; it fits
// tls.Config.GetCertificate, so each handshake sees the latest one.
func (m *CertManager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if cert := m.serving.Load(); cert != nil {
		return cert, nil
	}
	return nil, errors.New("the webhook serving certificate is not ready yet")
}

// CABundle returns the PEM certificates a client should trust: the current
// CA and, during a CA rotation, the previous one. Nil before Init and for a
// static manager.
func (m *CertManager) CABundle() []byte {
	if b := m.bundle.Load(); b != nil {
		return bytes.Clone(*b)
	}
	return nil
}

// Ready is closed once a serving certificate is available.
func (m *CertManager) Ready() <-chan struct{} { return m.ready }

// Init loads or creates the CA and issues the serving certificate, so that
// a server can start with a certificate. Run calls it as well; calling it
// first only makes failures visible earlier.
func (m *CertManager) Init(ctx context.Context) error {
	if m.static {
		return nil
	}
	return m.refresh(ctx)
}

// Run keeps the certificate fresh until ctx ends: it rechecks the CA and
// the certificate's expiry every CheckInterval and, with a client, watches
// the webhook configurations and patches their caBundle.
func (m *CertManager) Run(ctx context.Context) error {
	if !m.started.CompareAndSwap(false, true) {
		return errors.New("webhook certs: Run called twice")
	}
	if m.static {
		<-ctx.Done()
		return nil
	}
	if m.opts.Client != nil {
		stopPatcher, err := m.startPatcher(ctx)
		if err != nil {
			return err
		}
		defer stopPatcher()
	}
	retry := firstRetryInterval
	for {
		wait := m.opts.CheckInterval
		if err := m.refresh(ctx); err != nil {
			m.log.Error("refreshing the webhook certificate", "error", err)
			if m.serving.Load() == nil {
				wait, retry = min(retry, m.opts.CheckInterval), retry*2
			}
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
	}
}

// refresh brings the CA up to date (from the Secret, or in memory) and
// issues a serving certificate when there is none, the CA changed, or the
// current one is within RotateBefore of its expiry.
func (m *CertManager) refresh(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.opts.Now()
	ca, previous, err := m.currentCA(ctx, now)
	if err != nil {
		return err
	}
	caChanged := m.ca == nil || !bytes.Equal(m.ca.certPEM, ca.certPEM)
	m.ca, m.previousCA = ca, previous

	bundle := caBundle(ca, previous, now)
	if old := m.bundle.Load(); old == nil || !bytes.Equal(*old, bundle) {
		m.bundle.Store(&bundle)
		defer m.enqueueAll()
	}

	reason := ""
	switch cur := m.serving.Load(); {
	case cur == nil:
		reason = "initial"
	case caChanged:
		reason = "ca_changed"
	case cur.Leaf.NotAfter.Sub(now) < m.opts.RotateBefore:
		reason = "expiring"
	}
	if reason == "" {
		return nil
	}
	cert, err := ca.issue(m.dnsNames, m.ips, now, m.opts.CertValidity)
	if err != nil {
		return err
	}
	m.serving.Store(cert)
	m.metrics.CertRotations.WithLabelValues(reason).Inc()
	m.metrics.CertExpiry.Set(float64(cert.Leaf.NotAfter.Unix()))
	m.log.Info("issued webhook serving certificate", "reason", reason,
		"notAfter", cert.Leaf.NotAfter, "dnsNames", m.dnsNames, "ips", m.ips)
	m.readyOnce.Do(func() { close(m.ready) })
	return nil
}

// currentCA returns the CA to sign with and the previous CA's PEM (or nil).
func (m *CertManager) currentCA(ctx context.Context, now time.Time) (*authority, []byte, error) {
	if m.opts.Client != nil {
		return m.syncSecret(ctx, now)
	}
	if m.ca != nil && !m.caExpiring(m.ca, now) {
		return m.ca, m.previousCA, nil
	}
	ca, err := newAuthority(m.caCommonName(), now, m.opts.CAValidity)
	if err != nil {
		return nil, nil, err
	}
	var previous []byte
	if m.ca != nil {
		previous = m.ca.certPEM
	}
	return ca, previous, nil
}

func (m *CertManager) caExpiring(ca *authority, now time.Time) bool {
	return ca.cert.NotAfter.Sub(now) < m.opts.CARotateBefore
}

func (m *CertManager) caCommonName() string {
	if m.opts.Namespace != "" {
		return "meshpilot webhook CA (" + m.opts.Namespace + ")"
	}
	return "meshpilot webhook CA"
}

// caBundle is the current CA followed by the previous one while it is still
// valid.
func caBundle(ca *authority, previous []byte, now time.Time) []byte {
	bundle := bytes.Clone(ca.certPEM)
	if len(previous) > 0 && certValidAt(previous, now) {
		if len(bundle) > 0 && bundle[len(bundle)-1] != '\n' {
			bundle = append(bundle, '\n')
		}
		bundle = append(bundle, previous...)
	}
	return bundle
}

func certValidAt(certPEM []byte, now time.Time) bool {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	return err == nil && now.Before(cert.NotAfter)
}
