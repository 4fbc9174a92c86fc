package inject

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the injector's counters. Create them once with NewMetrics.
type Metrics struct {
	// Requests counts admission requests by outcome (injected, skipped,
	// failed) and reason (why a Pod was skipped or failed; empty when
	// injected).
	Requests *prometheus.CounterVec
	// Duration is the time spent answering one admission request.
	Duration prometheus.Histogram
	// Reloads counts loads of the injection ConfigMap by result (success,
	// error).
	Reloads *prometheus.CounterVec
}

// Outcomes, the outcome label of Requests.
const (
	OutcomeInjected = "injected"
	OutcomeSkipped  = "skipped"
	OutcomeFailed   = "failed"
)

// NewMetrics creates the metrics and registers them with reg; a nil reg
// leaves them unregistered.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_sidecar_injection_requests_total",
			Help: "Sidecar injection admission requests, by outcome and reason.",
		}, []string{"outcome", "reason"}),
		Duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meshpilot_sidecar_injection_duration_seconds",
			Help:    "Time to answer one sidecar injection admission request.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1},
		}),
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_sidecar_injection_config_reloads_total",
			Help: "Loads of the sidecar injection configuration, by result.",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Duration, m.Reloads)
	}
	return m
}
