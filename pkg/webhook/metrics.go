package webhook

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the webhook server's, the validation handler's and the
// caBundle patcher's counters. Create them once with NewMetrics and share
// them.
type Metrics struct {
	// Requests counts HTTP requests by handler path and status code.
	Requests *prometheus.CounterVec
	// RequestDuration observes how long handlers take, by path.
	RequestDuration *prometheus.HistogramVec
	// ValidationRequests counts admission reviews the validation handler
	// answered, by kind and operation ("other" for a kind it does not
	// validate or an operation Kubernetes does not have).
	ValidationRequests *prometheus.CounterVec
	// ValidationDenials counts denied reviews by kind.
	ValidationDenials *prometheus.CounterVec
	// BadRequests counts requests rejected before review (malformed body,
	// wrong method or content type), by path.
	BadRequests *prometheus.CounterVec
	// CABundlePatches counts caBundle updates of webhook configurations, by
	// configuration kind and result (ok, conflict, gone, error).
	CABundlePatches *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg; a nil reg
// leaves them unregistered (handy in tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_webhook_requests_total",
			Help: "HTTP requests to the webhook server, by path and status code.",
		}, []string{"path", "code"}),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "meshpilot_webhook_request_duration_seconds",
			Help:    "Time the webhook handlers take to answer, by path.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"path"}),
		ValidationRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_webhook_validation_requests_total",
			Help: "Admission reviews answered by the validation webhook, by kind and operation (other: a kind it does not validate, or an unknown operation).",
		}, []string{"kind", "operation"}),
		ValidationDenials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_webhook_validation_denials_total",
			Help: "Admission reviews the validation webhook denied, by kind.",
		}, []string{"kind"}),
		BadRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_webhook_bad_requests_total",
			Help: "Webhook requests rejected as malformed, by path.",
		}, []string{"path"}),
		CABundlePatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_webhook_cabundle_patches_total",
			Help: "caBundle updates of webhook configurations, by kind and result.",
		}, []string{"kind", "result"}),
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.RequestDuration, m.ValidationRequests, m.ValidationDenials,
			m.BadRequests, m.CABundlePatches)
	}
	return m
}
