package xds

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// istioMetrics are the ADS server's metrics under istiod's names, label names
// and histogram buckets, beside meshpilot's own, so that Istio's Grafana
// dashboards and alerts read meshpilot unchanged. istiod exposes them through
// OpenTelemetry's Prometheus exporter without unit or counter suffixes, so a
// counter is pilot_xds_pushes, not pilot_xds_pushes_total, and a histogram's
// series are pilot_xds_push_time_bucket, _sum and _count.
type istioMetrics struct {
	// pilot_xds_pushes{type}: responses sent by type (cds, eds, lds, rds,
	// sds, wds, ...), and send failures as cds_senderr, eds_senderr,
	// lds_senderr and rds_senderr.
	pushes *prometheus.CounterVec
	// pilot_xds_push_time{type}: generating and sending one response.
	pushTime *prometheus.HistogramVec
	// pilot_xds_config_size_bytes{type}: the resources of one response.
	configSize *prometheus.HistogramVec
	// pilot_proxy_convergence_time: from the oldest change of a push to the
	// last response that push sent a proxy.
	convergence prometheus.Histogram
	// pilot_xds{version}: connected streams by the client's ISTIO_VERSION.
	clients *prometheus.GaugeVec
	// pilot_total_xds_rejects{type}: responses rejected (NACKed).
	rejects *prometheus.CounterVec
	// pilot_xds_send_time: one Send on a stream.
	sendTime prometheus.Histogram
	// pilot_debounce_time: from the first change entering debounce to the
	// end of its push (push context built, connections handed the push).
	debounceTime prometheus.Histogram
	// pilot_pushcontext_init_seconds: one push context build.
	pushContextInit prometheus.Histogram
	// pilot_services: services in the served push context.
	services prometheus.GaugeFunc
	// pilot_push_triggers{type}: config updates by Istio's trigger reason.
	triggers *prometheus.CounterVec
	// pilot_xds_write_timeout: sends that timed out (the stream ends).
	writeTimeouts prometheus.Counter
	// pilot_total_xds_internal_errors: streams ended by an unexpected
	// receive error.
	internalErrors prometheus.Counter
}

// Histogram buckets of istiod (pilot/pkg/xds/monitoring.go and
// pkg/xds/monitoring.go in istio/istio).
var (
	istioPushTimeBuckets        = []float64{.01, .1, .5, 1, 3, 5, 10, 20, 30} // pilot_xds_push_time, pilot_debounce_time
	istioConvergenceBuckets     = []float64{.1, .5, 1, 3, 5, 10, 20, 30}
	istioSendTimeBuckets        = []float64{.01, .1, 1, 3, 5, 10, 20, 30}
	istioPushContextInitBuckets = []float64{.01, .1, .5, 1, 3, 5}
	istioConfigSizeBuckets      = []float64{1, 10000, 1000000, 4000000, 10000000, 40000000}
)

func newIstioMetrics(m *Metrics) *istioMetrics {
	return &istioMetrics{
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_xds_pushes",
			Help: "xDS responses sent, by short type; <type>_senderr counts sends that failed. istiod's name for meshpilot_xds_pushes_total.",
		}, []string{"type"}),
		pushTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pilot_xds_push_time",
			Help:    "Seconds to generate and send one xDS response, by short type.",
			Buckets: istioPushTimeBuckets,
		}, []string{"type"}),
		configSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pilot_xds_config_size_bytes",
			Help:    "Bytes of the resources in one xDS response, by short type.",
			Buckets: istioConfigSizeBuckets,
		}, []string{"type"}),
		convergence: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pilot_proxy_convergence_time",
			Help:    "Seconds from the oldest change in a push to the last response that push sent a proxy.",
			Buckets: istioConvergenceBuckets,
		}),
		clients: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pilot_xds",
			Help: "Connected xDS streams, by the ISTIO_VERSION their nodes report.",
		}, []string{"version"}),
		rejects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_total_xds_rejects",
			Help: "xDS responses a client rejected (NACKs), by short type.",
		}, []string{"type"}),
		sendTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pilot_xds_send_time",
			Help:    "Seconds one Send on an xDS stream took.",
			Buckets: istioSendTimeBuckets,
		}),
		debounceTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pilot_debounce_time",
			Help: "Seconds from the first change of a burst to its merged push being handed to the connections, " +
				"push context build included.",
			Buckets: istioPushTimeBuckets,
		}),
		pushContextInit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pilot_pushcontext_init_seconds",
			Help:    "Seconds to build one push context.",
			Buckets: istioPushContextInitBuckets,
		}),
		services: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pilot_services",
			Help: "Services in the push context being served.",
		}, func() float64 {
			if served := m.served.Load(); served != nil {
				if pc := (*served)(); pc != nil {
					return float64(len(pc.Services()))
				}
			}
			return 0
		}),
		triggers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_push_triggers",
			Help: "Config updates, counted once per reason they carry.",
		}, []string{"type"}),
		writeTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilot_xds_write_timeout",
			Help: "xDS sends that timed out, closing their stream.",
		}),
		internalErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilot_total_xds_internal_errors",
			Help: "xDS streams ended by an unexpected receive error.",
		}),
	}
}

func (im *istioMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{im.pushes, im.pushTime, im.configSize, im.convergence, im.clients, im.rejects, im.sendTime,
		im.debounceTime, im.pushContextInit, im.services, im.triggers, im.writeTimeouts, im.internalErrors}
}

// istioMetricType is Istio's type label for a type URL (its
// model.GetMetricType): the usual short names, wds and wads for workload
// discovery and its authorization policies, the type URL itself otherwise.
func istioMetricType(typeURL string) string {
	switch typeURL {
	case ClusterType:
		return "cds"
	case ListenerType:
		return "lds"
	case RouteType:
		return "rds"
	case EndpointType:
		return "eds"
	case SecretType:
		return "sds"
	case AddressType, "type.googleapis.com/istio.workload.Workload":
		return "wds"
	case AuthorizationType:
		return "wads"
	case "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig":
		return "ecds"
	case "type.googleapis.com/istio.networking.nds.v1.NameTable":
		return "nds"
	case "type.googleapis.com/istio.mesh.v1alpha1.ProxyConfig":
		return "pcds"
	case "type.googleapis.com/envoy.config.bootstrap.v3.Bootstrap":
		return "bds"
	}
	return typeURL
}

// typeMetrics are the children, for one type URL, of the metrics a
// response or a NACK records: resolved once per watch, so that a push looks
// no label up.
type typeMetrics struct {
	pushes   prometheus.Counter
	pushTime prometheus.Observer
	size     prometheus.Observer
	nacks    prometheus.Counter

	istioPushes   prometheus.Counter
	istioPushTime prometheus.Observer
	istioSize     prometheus.Observer
	istioRejects  prometheus.Counter
	// istioSendErrors is nil for the types whose send errors Istio does not
	// count (all but CDS, EDS, LDS and RDS).
	istioSendErrors prometheus.Counter
}

// forType returns the metrics of typeURL. Watches exist only for the types a
// proxy is served, so the cache is bounded by the generators.
func (m *Metrics) forType(typeURL string) *typeMetrics {
	if tm, ok := m.types.Load(typeURL); ok {
		return tm.(*typeMetrics)
	}
	short, istio := shortType(typeURL), istioMetricType(typeURL)
	tm := &typeMetrics{
		pushes:        m.pushes.WithLabelValues(short),
		pushTime:      m.pushTime.WithLabelValues(short),
		size:          m.responseSize.WithLabelValues(short),
		nacks:         m.nacks.WithLabelValues(short),
		istioPushes:   m.istio.pushes.WithLabelValues(istio),
		istioPushTime: m.istio.pushTime.WithLabelValues(istio),
		istioSize:     m.istio.configSize.WithLabelValues(istio),
		istioRejects:  m.istio.rejects.WithLabelValues(istio),
	}
	switch typeURL {
	case ClusterType, EndpointType, ListenerType, RouteType:
		tm.istioSendErrors = m.istio.pushes.WithLabelValues(istio + "_senderr")
	}
	actual, _ := m.types.LoadOrStore(typeURL, tm)
	return actual.(*typeMetrics)
}

// pushed records one response sent, of size bytes of resources.
func (tm *typeMetrics) pushed(took time.Duration, size int) {
	s := took.Seconds()
	tm.pushes.Inc()
	tm.pushTime.Observe(s)
	tm.size.Observe(float64(size))
	tm.istioPushes.Inc()
	tm.istioPushTime.Observe(s)
	tm.istioSize.Observe(float64(size))
}

// sendFailed records a response that could not be sent. As istiod does, a
// stream closing (Canceled, Unavailable) is no send error.
func (tm *typeMetrics) sendFailed(err error) {
	if tm.istioSendErrors == nil {
		return
	}
	if s, ok := status.FromError(err); ok && (s.Code() == codes.Canceled || s.Code() == codes.Unavailable) {
		return
	}
	tm.istioSendErrors.Inc()
}

func (tm *typeMetrics) rejected() {
	tm.nacks.Inc()
	tm.istioRejects.Inc()
}

// maxIstioVersions bounds the version label values of pilot_xds: the
// version is the ISTIO_VERSION a client's node metadata claims, and any
// client may connect to 15010. Versions past the bound, or longer than
// maxIstioVersionLen, count as istioVersionOther.
const (
	maxIstioVersions   = 32
	maxIstioVersionLen = 64
	istioVersionOther  = "other"
)

// istioClients returns the pilot_xds gauge for a client that claims version.
func (m *Metrics) istioClients(version string) prometheus.Gauge {
	if len(version) > maxIstioVersionLen {
		version = istioVersionOther
	}
	m.versionsMu.Lock()
	defer m.versionsMu.Unlock()
	if g, ok := m.versions[version]; ok {
		return g
	}
	if len(m.versions) >= maxIstioVersions {
		version = istioVersionOther
		if g, ok := m.versions[version]; ok {
			return g
		}
	}
	g := m.istio.clients.WithLabelValues(version)
	m.versions[version] = g
	return g
}

// Istio's trigger reasons (pilot/pkg/model/push_context.go TriggerReason),
// the type label of pilot_push_triggers.
const (
	istioTriggerEndpoint  = "endpoint"
	istioTriggerConfig    = "config"
	istioTriggerService   = "service"
	istioTriggerProxy     = "proxy"
	istioTriggerGlobal    = "global"
	istioTriggerSecret    = "secret"
	istioTriggerNamespace = "namespace"
	istioTriggerUnknown   = "unknown"
)

// istioTriggerReasons are the reasons a kind's change counts as; a kind not
// listed is "unknown".
var istioTriggerReasons = map[model.Kind]string{
	model.KindEndpoints:          istioTriggerEndpoint,
	model.KindService:            istioTriggerService,
	model.KindWorkload:           istioTriggerProxy,
	model.KindNamespace:          istioTriggerNamespace,
	model.KindDestinationRule:    istioTriggerConfig,
	model.KindPeerAuthentication: istioTriggerConfig,
	model.KindVirtualService:     istioTriggerConfig,
	model.KindIngress:            istioTriggerConfig,
	model.KindIngressClass:       istioTriggerConfig,
	model.KindSecret:             istioTriggerSecret,
	// What a source could not read is config too: a file that stopped
	// parsing, or parses again.
	model.KindSourceProblems: istioTriggerConfig,
}

// triggers are the pre-resolved trigger counters: meshpilot's by kind and
// Istio's by reason.
type triggers struct {
	ours        *prometheus.CounterVec
	forced      prometheus.Counter
	istioGlobal prometheus.Counter
	// byKind is indexed by model.Kind; nil for a kind without a name.
	byKind []kindTrigger
	// reasons are Istio's reason counters, indexed by kindTrigger.reason.
	reasons []prometheus.Counter

	// unknown kinds are resolved when they occur.
	mu      sync.Mutex
	unknown map[model.Kind]prometheus.Counter
}

type kindTrigger struct {
	ours   prometheus.Counter
	reason int
}

func newTriggers(m *Metrics) *triggers {
	t := &triggers{
		ours:        m.triggers,
		forced:      m.triggers.WithLabelValues("forced"),
		istioGlobal: m.istio.triggers.WithLabelValues(istioTriggerGlobal),
		unknown:     map[model.Kind]prometheus.Counter{},
	}
	reasonIndex := map[string]int{}
	reasonOf := func(reason string) int {
		i, ok := reasonIndex[reason]
		if !ok {
			i = len(t.reasons)
			reasonIndex[reason] = i
			t.reasons = append(t.reasons, m.istio.triggers.WithLabelValues(reason))
		}
		return i
	}
	reasonOf(istioTriggerUnknown) // index 0
	for kind, reason := range istioTriggerReasons {
		if int(kind) >= len(t.byKind) {
			t.byKind = append(t.byKind, make([]kindTrigger, int(kind)+1-len(t.byKind))...)
		}
		t.byKind[kind] = kindTrigger{ours: m.triggers.WithLabelValues(kind.String()), reason: reasonOf(reason)}
	}
	return t
}

// record counts one config update: meshpilot's counter once per kind it
// names (forced for a full push of everything), Istio's once per reason.
func (t *triggers) record(req *model.PushRequest) {
	if req.Full && len(req.ConfigsUpdated) == 0 {
		t.forced.Inc()
		t.istioGlobal.Inc()
		return
	}
	var kinds [4]uint64 // a bit per model.Kind
	var reasons uint64  // a bit per reason index
	for key := range req.ConfigsUpdated {
		k := key.Kind
		if kinds[k>>6]&(1<<(k&63)) != 0 {
			continue
		}
		kinds[k>>6] |= 1 << (k & 63)
		reason := 0
		if int(k) < len(t.byKind) && t.byKind[k].ours != nil {
			t.byKind[k].ours.Inc()
			reason = t.byKind[k].reason
		} else {
			t.unknownKind(k).Inc()
		}
		reasons |= 1 << reason
	}
	for i, c := range t.reasons {
		if reasons&(1<<i) != 0 {
			c.Inc()
		}
	}
}

func (t *triggers) unknownKind(k model.Kind) prometheus.Counter {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.unknown[k]
	if !ok {
		c = t.ours.WithLabelValues(k.String())
		t.unknown[k] = c
	}
	return c
}
