package xds

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// Metrics are the ADS server's Prometheus metrics, meshpilot's own and,
// beside them, istiod's (see istioMetrics). A nil *Metrics (or one from
// NewMetrics(nil)) records nothing registered anywhere.
type Metrics struct {
	clients         *prometheus.GaugeVec
	pushes          *prometheus.CounterVec
	pushTime        *prometheus.HistogramVec
	responseSize    *prometheus.HistogramVec
	convergence     prometheus.Histogram
	nacks           *prometheus.CounterVec
	buildTime       prometheus.Histogram
	triggers        *prometheus.CounterVec
	debouncedPushes *prometheus.CounterVec
	streamErrors    *prometheus.CounterVec
	generateErrors  *prometheus.CounterVec
	generatorPanics *prometheus.CounterVec
	unservedTypes   prometheus.Counter
	syncWait        prometheus.Histogram
	problems        prometheus.GaugeFunc

	istio *istioMetrics

	// served returns the served push context; the server that uses these
	// metrics sets it (NewServer). The gauges that read it are 0 until then.
	served atomic.Pointer[func() *pushcontext.PushContext]

	// types caches the per-type children (typeURL -> *typeMetrics).
	types sync.Map
	// triggerCounters are the push trigger children.
	triggerCounters *triggers
	// versions caches pilot_xds's children by version label.
	versionsMu sync.Mutex
	versions   map[string]prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg (if non-nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	latency := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	m := &Metrics{
		clients: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meshpilot_xds_clients",
			Help: "Connected ADS streams, by protocol variant (sotw or delta).",
		}, []string{"type"}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_xds_pushes_total",
			Help: "xDS responses sent, by resource type (cds, eds, lds, rds, ...).",
		}, []string{"type"}),
		pushTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "meshpilot_xds_push_time_seconds",
			Help:    "Time to generate and send one xDS response, by resource type.",
			Buckets: latency,
		}, []string{"type"}),
		responseSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "meshpilot_xds_response_size_bytes",
			Help: "Bytes of the resources in one xDS response, by resource type.",
			// 1 KiB to 64 MiB: a lone load assignment to a gateway's full LDS.
			Buckets: prometheus.ExponentialBuckets(1<<10, 4, 9),
		}, []string{"type"}),
		convergence: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meshpilot_proxy_convergence_seconds",
			Help:    "Time from the oldest change in a push to the response reaching the stream.",
			Buckets: latency,
		}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_xds_nacks_total",
			Help: "Responses rejected by clients, by resource type.",
		}, []string{"type"}),
		buildTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meshpilot_pushcontext_build_seconds",
			Help:    "Time to build a push context.",
			Buckets: latency,
		}),
		triggers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_xds_push_triggers_total",
			Help: "Config updates received before debouncing, by the kind of object that changed (forced for a full push of everything); counted from the first push context build on, which holds the sources' initial lists.",
		}, []string{"kind"}),
		debouncedPushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_xds_debounced_pushes_total",
			Help: "Pushes started after debouncing, by kind (full or eds).",
		}, []string{"type"}),
		streamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_xds_stream_errors_total",
			Help: "ADS streams ended by an error, by reason.",
		}, []string{"reason"}),
		generateErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_xds_generate_errors_total",
			Help: "Generator failures, by resource type; the previous response stays in place.",
		}, []string{"type"}),
		generatorPanics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_xds_generator_panics_total",
			Help: "Generator panics, by resource type; only that proxy's push of that type fails.",
		}, []string{"type"}),
		unservedTypes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshpilot_xds_unserved_type_requests_total",
			Help: "Requests for a type URL the proxy is not served (such as NDS or ECDS); answered with no resources, the stream kept.",
		}),
		syncWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meshpilot_xds_sync_wait_seconds",
			Help:    "How long a new stream waited for its turn to be sent its initial configuration (--max-concurrent-syncs).",
			Buckets: latency,
		}),
	}
	m.problems = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meshpilot_translation_problems",
		Help: "Config effects generators had to drop while translating the served push context (see /debug/pushcontext).",
	}, func() float64 {
		if served := m.served.Load(); served != nil {
			if pc := (*served)(); pc != nil {
				return float64(pc.ProblemCount())
			}
		}
		return 0
	})
	m.istio = newIstioMetrics(m)
	m.triggerCounters = newTriggers(m)
	m.versions = map[string]prometheus.Gauge{}
	if reg != nil {
		reg.MustRegister(m.clients, m.pushes, m.pushTime, m.responseSize, m.convergence, m.nacks, m.buildTime,
			m.triggers, m.debouncedPushes, m.streamErrors, m.generateErrors, m.generatorPanics, m.unservedTypes, m.syncWait, m.problems)
		reg.MustRegister(m.istio.collectors()...)
	}
	return m
}

// observe makes the gauges that read the served push context read s's.
func (m *Metrics) observe(s *Server) {
	served := s.PushContext
	m.served.Store(&served)
}

// built records one push context build.
func (m *Metrics) built(took time.Duration) {
	m.buildTime.Observe(took.Seconds())
	m.istio.pushContextInit.Observe(took.Seconds())
}

// debounced records the time from the first change of a debounced push to
// the end of that push.
func (m *Metrics) debounced(first time.Time) {
	m.istio.debounceTime.Observe(time.Since(first).Seconds())
}

// converged records that a push reached a proxy: the last response it sent
// the proxy is out. It is recorded once per proxy and push that sent the
// proxy something, as istiod records it once per proxy push;
// meshpilot_proxy_convergence_seconds is per response.
func (m *Metrics) converged(start time.Time) {
	if !start.IsZero() {
		m.istio.convergence.Observe(time.Since(start).Seconds())
	}
}

// sent records one Send on a stream.
func (m *Metrics) sent(took time.Duration) {
	m.istio.sendTime.Observe(took.Seconds())
}

// configUpdate counts the triggers of one config update.
func (m *Metrics) configUpdate(req *model.PushRequest) {
	m.triggerCounters.record(req)
}

// Stream error reasons.
const (
	reasonInvalidArgument = "invalid_argument"
	reasonUnauthenticated = "unauthenticated"
	reasonSendTimeout     = "send_timeout"
	reasonSendError       = "send_error"
	reasonRecvError       = "recv_error"
)
