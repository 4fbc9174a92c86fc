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

	// IstioConfigEvents and IstioRegistryEvents are istiod's
	// pilot_k8s_cfg_events and pilot_k8s_reg_events: the Kubernetes
	// source's informer events as they arrive, by Istio's type (the kind, as
	// Istio names it) and event (add, update, delete). Config kinds are
	// DestinationRule, PeerAuthentication, VirtualService, Ingress and
	// IngressClass; registry kinds are Services, EndpointSlice, Pods and
	// Namespaces.
	// Secrets count in neither, as in istiod. Like istiod's counters, they
	// have no unit or _total suffix.
	IstioConfigEvents   *prometheus.CounterVec
	IstioRegistryEvents *prometheus.CounterVec
	// FilesRejected is the number of config files that do not parse or
	// cannot be read now, their directory included; the file source serves
	// the objects of their last version that did.
	FilesRejected prometheus.Gauge
}

// kubeEventCounters are one kind's event counters of the Kubernetes
// source, resolved when its informer is watched.
type kubeEventCounters struct {
	// upserts and deletes count events applied to the store
	// (meshpilot_source_events_total).
	upserts, deletes prometheus.Counter
	// istioAdds, istioUpdates and istioDeletes count events received; nil
	// for a kind istiod counts no events of.
	istioAdds, istioUpdates, istioDeletes prometheus.Counter
}

// istioEventTypes are the kinds of the Kubernetes source that istiod counts
// events of, with the counter and the type label istiod uses for them.
var istioEventTypes = map[string]struct {
	registry bool
	name     string
}{
	"Service":            {registry: true, name: "Services"},
	"EndpointSlice":      {registry: true, name: "EndpointSlice"},
	"Pod":                {registry: true, name: "Pods"},
	"Namespace":          {registry: true, name: "Namespaces"},
	"DestinationRule":    {name: "DestinationRule"},
	"PeerAuthentication": {name: "PeerAuthentication"},
	"VirtualService":     {name: "VirtualService"},
	"Ingress":            {name: "Ingress"},
	"IngressClass":       {name: "IngressClass"},
}

// kubeEvents resolves kind's event counters of the Kubernetes source.
func (m *Metrics) kubeEvents(kind string) kubeEventCounters {
	c := kubeEventCounters{
		upserts: m.Events.WithLabelValues(KubeSourceName, kind, "upsert"),
		deletes: m.Events.WithLabelValues(KubeSourceName, kind, "delete"),
	}
	if t, ok := istioEventTypes[kind]; ok {
		vec := m.IstioConfigEvents
		if t.registry {
			vec = m.IstioRegistryEvents
		}
		c.istioAdds = vec.WithLabelValues(t.name, "add")
		c.istioUpdates = vec.WithLabelValues(t.name, "update")
		c.istioDeletes = vec.WithLabelValues(t.name, "delete")
	}
	return c
}

// received counts an event as istiod would; c is one of istioAdds,
// istioUpdates and istioDeletes.
func received(c prometheus.Counter) {
	if c != nil {
		c.Inc()
	}
}

// Reasons an object is rejected, the reason label of ConfigErrors.
const (
	ReasonDecode      = "decode"
	ReasonUnknownKind = "unknown_kind"
	ReasonInvalid     = "invalid"
	ReasonDuplicate   = "duplicate"
	// ReasonParse is a config file that does not parse; its objects are
	// kept as they were (kind "unknown").
	ReasonParse = "parse"
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
		IstioConfigEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_k8s_cfg_events",
			Help: "Kubernetes source events for Istio and Ingress config, by kind and event.",
		}, []string{"type", "event"}),
		IstioRegistryEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pilot_k8s_reg_events",
			Help: "Kubernetes source events for Services, EndpointSlices, Pods and Namespaces, by kind and event.",
		}, []string{"type", "event"}),
		FilesRejected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshpilot_config_files_rejected",
			Help: "Config files that do not parse or cannot be read now; the objects of their last version that did are served.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.ConfigErrors, m.Events, m.CRDMissing, m.WatchErrors, m.IstioConfigEvents, m.IstioRegistryEvents,
			m.FilesRejected)
	}
	return m
}
