package nodeproxy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshpilot/meshpilot/pkg/hbone"
)

// Metrics are the node proxy's Prometheus metrics. It implements
// hbone.Metrics, so tunnels in both directions are counted as they open,
// close and are refused.
type Metrics struct {
	conns, streams         *prometheus.CounterVec
	openConns, openStreams *prometheus.GaugeVec
	bytes                  *prometheus.CounterVec
	refusals               *prometheus.CounterVec
	passthrough            prometheus.Counter
	localWorkloads         prometheus.Gauge
	workloadErrors         prometheus.Counter
	certs                  prometheus.Gauge
	certExpiry             prometheus.Gauge
	wdsUpdates             *prometheus.CounterVec
	membership             *prometheus.CounterVec
}

// NewMetrics makes the metrics and registers them with reg (nil: not
// registered, as in tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshpilot_nodeproxy_connections_total",
			Help: "Mutual-TLS HBONE connections opened, by direction."}, []string{"direction"}),
		openConns: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meshpilot_nodeproxy_connections_open",
			Help: "Mutual-TLS HBONE connections open now, by direction."}, []string{"direction"}),
		streams: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshpilot_nodeproxy_tunnels_total",
			Help: "Tunnels (CONNECT streams) opened, by direction."}, []string{"direction"}),
		openStreams: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meshpilot_nodeproxy_tunnels_open",
			Help: "Tunnels open now, by direction."}, []string{"direction"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshpilot_nodeproxy_bytes_total",
			Help: "Bytes carried by closed tunnels, by direction and way (sent toward the destination, received from it)."},
			[]string{"direction", "way"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshpilot_nodeproxy_refusals_total",
			Help: "Connections and tunnels refused, by direction and reason."}, []string{"direction", "reason"}),
		passthrough: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshpilot_nodeproxy_passthrough_connections_total",
			Help: "Outbound connections to destinations without HBONE, sent on as plain TCP."}),
		localWorkloads: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshpilot_nodeproxy_workloads",
			Help: "Ambient workloads on this node that the proxy serves."}),
		workloadErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "meshpilot_nodeproxy_workload_errors_total",
			Help: "Workloads that could not be served (network namespace or listener failures); retried on the next change."}),
		certs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshpilot_nodeproxy_certificates",
			Help: "Workload certificates held."}),
		certExpiry: prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshpilot_nodeproxy_certificate_expiry_timestamp_seconds",
			Help: "When the first of the held workload certificates expires (Unix seconds); 0 when none is held."}),
		wdsUpdates: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshpilot_nodeproxy_wds_resources_total",
			Help: "WDS resources applied, by kind of change (updated, removed)."}, []string{"change"}),
		membership: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshpilot_nodeproxy_membership_changes_total",
			Help: "Running pods captured as they joined ambient mode or released as they left it, by change (joined, left) and result (ok, error; an error is retried)."},
			[]string{"change", "result"}),
	}
	if reg != nil {
		reg.MustRegister(m.conns, m.openConns, m.streams, m.openStreams, m.bytes, m.refusals, m.passthrough,
			m.localWorkloads, m.workloadErrors, m.certs, m.certExpiry, m.wdsUpdates, m.membership)
	}
	return m
}

func (m *Metrics) ConnOpened(d hbone.Direction) {
	m.conns.WithLabelValues(d.String()).Inc()
	m.openConns.WithLabelValues(d.String()).Inc()
}
func (m *Metrics) ConnClosed(d hbone.Direction) { m.openConns.WithLabelValues(d.String()).Dec() }
func (m *Metrics) StreamOpened(d hbone.Direction) {
	m.streams.WithLabelValues(d.String()).Inc()
	m.openStreams.WithLabelValues(d.String()).Inc()
}
func (m *Metrics) StreamClosed(d hbone.Direction, sent, received int64) {
	m.openStreams.WithLabelValues(d.String()).Dec()
	m.bytes.WithLabelValues(d.String(), "sent").Add(float64(sent))
	m.bytes.WithLabelValues(d.String(), "received").Add(float64(received))
}
func (m *Metrics) Refused(d hbone.Direction, r hbone.Reason) { m.refused(d, string(r)) }

func (m *Metrics) refused(d hbone.Direction, reason string) {
	m.refusals.WithLabelValues(d.String(), reason).Inc()
}

func (m *Metrics) certsChanged(held int, earliest time.Time) {
	m.certs.Set(float64(held))
	if earliest.IsZero() {
		m.certExpiry.Set(0)
		return
	}
	m.certExpiry.Set(float64(earliest.Unix()))
}

func (m *Metrics) membershipChange(change string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.membership.WithLabelValues(change, result).Inc()
}

func (m *Metrics) wdsResponse(updated, removed int) {
	m.wdsUpdates.WithLabelValues("updated").Add(float64(updated))
	m.wdsUpdates.WithLabelValues("removed").Add(float64(removed))
}
