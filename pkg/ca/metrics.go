package ca

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the CA's counters, named and labelled as istiod's
// (security/pkg/server/ca/monitoring.go), so that Istio's dashboards and
// alerts work unchanged. Create them once with NewMetrics and share them.
type Metrics struct {
	// CSRs counts every CreateCertificate call.
	CSRs prometheus.Counter
	// Success counts certificates issued.
	Success prometheus.Counter
	// AuthnFailures counts callers no authenticator accepted.
	AuthnFailures prometheus.Counter
	// CSRParseErrors counts CSRs refused as malformed, oversized, badly
	// signed, weak-keyed, or naming another identity.
	CSRParseErrors prometheus.Counter
	// IDExtractionErrors counts callers whose proof held no usable identity
	// (a token of a user that is not a ServiceAccount, a certificate
	// without exactly one SPIFFE URI, a malformed ImpersonatedIdentity).
	IDExtractionErrors prometheus.Counter
	// SignErrors counts refusals by Sign, by istiod's error type
	// (CSR_ERROR, TTL_ERROR, CERT_GEN_ERROR).
	SignErrors *prometheus.CounterVec
	// RootExpiry is when the root expires, in Unix seconds; CertChainExpiry
	// when the first certificate between a leaf and the root (the signing
	// certificate, an intermediate) expires, which for a self-signed root
	// is the root itself. Both follow every load and reload of the root.
	RootExpiry      prometheus.Gauge
	CertChainExpiry prometheus.Gauge
	// RootReloads counts attempts to take new key material from the CA
	// Secrets, by result: ok (replaced), error (refused; the old root
	// stays), held_back (valid later; taken then). istiod has no such
	// counter, so it has our prefix.
	RootReloads *prometheus.CounterVec
	// ServingCertExpiry is the NotAfter of each listener's serving
	// certificate (listener: xds-tls, webhook), in Unix seconds.
	ServingCertExpiry *prometheus.GaugeVec
	// ServingCertFailures counts failed issuances of each listener's
	// serving certificate (an expired CA, for one); the one in use stays.
	ServingCertFailures *prometheus.CounterVec
	// AuthzFailures counts calls refused with PermissionDenied
	// (impersonation). istiod has no such counter, so it has our prefix.
	AuthzFailures prometheus.Counter
	// CheckErrors counts calls the CA could not decide because checking
	// the caller (TokenReview, the Pod lookups of impersonation) failed on
	// the CA's side, by error type (UNAVAILABLE_ERROR, RBAC_ERROR). These
	// are neither authentication nor authorization refusals: the caller
	// may be entitled to its certificate. The label is spelled as
	// citadel_server_csr_sign_err_count's, so one alert rule can watch both.
	CheckErrors *prometheus.CounterVec
}

// Error types of CheckErrors.
const (
	// checkErrUnavailable: the API server gave no answer (unreachable,
	// overloaded, timed out); the caller is told to retry.
	checkErrUnavailable = "UNAVAILABLE_ERROR"
	// checkErrRBAC: the API server refused the CA's own request (403):
	// its ServiceAccount lacks a permission until an operator grants it.
	checkErrRBAC = "RBAC_ERROR"
)

// NewMetrics creates the metrics and registers them with reg; a nil reg
// leaves them unregistered (handy in tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &Metrics{
		CSRs:               counter("citadel_server_csr_count", "The number of CSRs received by the CA."),
		Success:            counter("citadel_server_success_cert_issuance_count", "The number of certificates issuances that have succeeded."),
		AuthnFailures:      counter("citadel_server_authentication_failure_count", "The number of authentication failures."),
		CSRParseErrors:     counter("citadel_server_csr_parsing_err_count", "The number of errors occurred when parsing the CSR."),
		IDExtractionErrors: counter("citadel_server_id_extraction_err_count", "The number of errors occurred when extracting the ID from the caller's proof."),
		SignErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "citadel_server_csr_sign_err_count",
			Help: "The number of errors occurred when signing the CSR, by error type.",
		}, []string{"error"}),
		RootExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "citadel_server_root_cert_expiry_timestamp",
			Help: "The unix timestamp, in seconds, when the CA root cert will expire.",
		}),
		CertChainExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "citadel_server_cert_chain_expiry_timestamp",
			Help: "The unix timestamp, in seconds, when the CA cert chain will expire.",
		}),
		RootReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_ca_root_reloads_total",
			Help: "Attempts to load new key material from the CA Secrets, by result (ok, error, held_back).",
		}, []string{"result"}),
		ServingCertExpiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meshpilot_serving_cert_expiry_timestamp_seconds",
			Help: "When the control plane's serving certificate of each TLS listener expires, in Unix seconds.",
		}, []string{"listener"}),
		ServingCertFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_serving_cert_issue_failures_total",
			Help: "Failed issuances of the serving certificate of each TLS listener.",
		}, []string{"listener"}),
		AuthzFailures: counter("meshpilot_ca_authorization_failure_count", "CreateCertificate calls refused with PermissionDenied (impersonation)."),
		CheckErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_ca_caller_check_err_count",
			Help: "CreateCertificate calls left undecided because checking the caller against the API server failed, by error type.",
		}, []string{"error"}),
	}
	if reg != nil {
		reg.MustRegister(m.CSRs, m.Success, m.AuthnFailures, m.CSRParseErrors, m.IDExtractionErrors,
			m.SignErrors, m.RootExpiry, m.CertChainExpiry, m.RootReloads, m.ServingCertExpiry, m.ServingCertFailures, m.AuthzFailures, m.CheckErrors)
	}
	return m
}

// observeAuthority sets the expiry gauges from the Authority in use.
func (m *Metrics) observeAuthority(a *Authority) {
	m.RootExpiry.Set(unixSeconds(a.RootExpiry()))
	m.CertChainExpiry.Set(unixSeconds(a.CertChainExpiry()))
}

func unixSeconds(t time.Time) float64 { return float64(t.Unix()) }
