package controllers

import "github.com/prometheus/client_golang/prometheus"

// IngressStatusMetrics are the metrics of the write side: the Ingress status
// writer, the leader elector and the Ingress problem reporter. They are kept
// apart from the sources' Metrics because they exist only where status is
// written. Create them once with NewIngressStatusMetrics and share them.
type IngressStatusMetrics struct {
	// StatusWrites counts Ingress status reconciles by result: "updated",
	// "unchanged" (nothing to write), "conflict" (an update lost a race and
	// was retried) and "error".
	StatusWrites *prometheus.CounterVec
	// Leader is 1 while this replica holds the lease, by lease name.
	Leader *prometheus.GaugeVec
	// LeaderAcquisitions counts the terms this replica started as leader.
	LeaderAcquisitions *prometheus.CounterVec
	// IngressProblems is the number of problems each Ingress has now, as
	// this replica sees them; series vanish when an Ingress is clean again.
	IngressProblems *prometheus.GaugeVec
	// ProblemEvents counts the Kubernetes Events the leader sent about
	// Ingress problems, by event type (Warning, Normal).
	ProblemEvents *prometheus.CounterVec
}

// Results of a status reconcile, the result label of StatusWrites.
const (
	StatusUpdated   = "updated"
	StatusUnchanged = "unchanged"
	StatusConflict  = "conflict"
	StatusError     = "error"
)

// NewIngressStatusMetrics creates the metrics and registers them with reg;
// a nil reg leaves them unregistered.
func NewIngressStatusMetrics(reg prometheus.Registerer) *IngressStatusMetrics {
	m := &IngressStatusMetrics{
		StatusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_ingress_status_writes_total",
			Help: "Ingress status reconciles, by result (updated, unchanged, conflict, error).",
		}, []string{"result"}),
		Leader: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meshpilot_leader",
			Help: "1 while this replica holds the named leader-election lease, else 0.",
		}, []string{"lease"}),
		LeaderAcquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_leader_acquisitions_total",
			Help: "Times this replica acquired the named leader-election lease.",
		}, []string{"lease"}),
		IngressProblems: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meshpilot_ingress_problems",
			Help: "Problems found in an owned Ingress at the last push context build.",
		}, []string{"namespace", "name"}),
		ProblemEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshpilot_ingress_problem_events_total",
			Help: "Kubernetes Events sent about Ingress problems, by event type.",
		}, []string{"type"}),
	}
	if reg != nil {
		reg.MustRegister(m.StatusWrites, m.Leader, m.LeaderAcquisitions, m.IngressProblems, m.ProblemEvents)
	}
	return m
}
