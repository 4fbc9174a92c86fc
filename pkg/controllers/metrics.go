package controllers

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the sources' counters. Create them once with NewMetrics and
// share them between sources: the source is a label.
type Metrics struct {
	// ConfigErrors counts objects that were rejected: malformed documents,
	// unknown kinds and invalid objects.
	ConfigErrors *prometheus.CounterVec
	// Events counts objects applied to the store, by event (upsert, delete).
	Events *prometheus.CounterVec
	// CRDMissing counts starts at which a watched CRD was not served.
	CRDMissing *prometheus.CounterVec
	// WatchErrors counts failed lists and watches of the Kubernetes source,
	// by kind and reason (forbidden, expired, other).
	WatchErrors *prometheus.CounterVec
}

// Reasons an object is rejected, the reason label of ConfigErrors.
const (
	ReasonDecode      = "decode"
	ReasonUnknownKind = "unknown_kind"
	ReasonInvalid     = "invalid"
	ReasonDuplicate   = "duplicate"
)

// NewMetrics creates the metrics and registers them with reg; a nil reg
// leaves them unregistered (handy in tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ConfigErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_config_errors_total",
			Help: "Objects a source rejected, by source, kind and reason.",
		}, []string{"source", "kind", "reason"}),
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_source_events_total",
			Help: "Objects a source applied to the store, by source, kind and event.",
		}, []string{"source", "kind", "event"}),
		CRDMissing: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_kube_crd_missing_total",
			Help: "Times the Kubernetes source started while a CRD it watches was not served.",
		}, []string{"resource"}),
		WatchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_kube_watch_errors_total",
			Help: "Failed lists and watches of the Kubernetes source, by kind and reason.",
		}, []string{"kind", "reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.ConfigErrors, m.Events, m.CRDMissing, m.WatchErrors)
	}
	return m
}
