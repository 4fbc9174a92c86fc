package model

import (
	"maps"
	"slices"
)

// Workload is a Pod: where it runs, who it is, and its labels, plus what
// workload discovery (WDS) tells node proxies about it. Workloads are
// immutable once stored: a change stores a new one.
//
// Sidecars and gRPC proxies read only its name, namespace, IPs and labels
// through the push context (the rest reaches them through endpoints), but
// node proxies are sent every field, so the store announces a change of any
// field of a workload that has IPs (see proxyVisible).
type Workload struct {
	Name           string
	Namespace      string
	IPs            []string
	Labels         map[string]string
	ServiceAccount string
	NodeName       string
	Locality       Locality

	// WorkloadName names what runs the Pod (a Deployment, a CronJob), as
	// Istio derives it from the Pod's controller; the Pod's name otherwise.
	WorkloadName string
	// CanonicalName and CanonicalRevision are the canonical service labels,
	// with Istio's fallbacks (see CanonicalService).
	CanonicalName     string
	CanonicalRevision string
	// Ready is set when the Pod is Ready and not being deleted.
	Ready bool
	// HostNetwork is set for a Pod in its node's network namespace.
	HostNetwork bool
	// Redirected is set when the Pod carries the annotation
	// ambient.istio.io/redirection: enabled, which the CNI agent writes once
	// the Pod's traffic is captured by the node proxy.
	Redirected bool
	// NamedPorts are the Pod's named TCP container ports (the targets a
	// Service's named targetPort resolves to), sorted by name.
	NamedPorts []NamedPort
}

// NamedPort is a named container port.
type NamedPort struct {
	Name string
	Port uint32
}

// Key identifies the workload in the store.
func (w *Workload) Key() NamespacedName {
	return NamespacedName{Namespace: w.Namespace, Name: w.Name}
}

// PortByName returns the number of the named container port, 0 if none.
func (w *Workload) PortByName(name string) uint32 {
	if i, found := slices.BinarySearchFunc(w.NamedPorts, name, func(p NamedPort, n string) int {
		switch {
		case p.Name < n:
			return -1
		case p.Name > n:
			return 1
		}
		return 0
	}); found {
		return w.NamedPorts[i].Port
	}
	return 0
}

// Equal reports whether two workloads hold the same values.
func (w *Workload) Equal(o *Workload) bool {
	if w == nil || o == nil {
		return w == o
	}
	return w.Name == o.Name && w.Namespace == o.Namespace && w.ServiceAccount == o.ServiceAccount &&
		w.NodeName == o.NodeName && w.Locality == o.Locality &&
		w.WorkloadName == o.WorkloadName && w.CanonicalName == o.CanonicalName &&
		w.CanonicalRevision == o.CanonicalRevision && w.Ready == o.Ready && w.HostNetwork == o.HostNetwork &&
		w.Redirected == o.Redirected && slices.Equal(w.IPs, o.IPs) && maps.Equal(w.Labels, o.Labels) &&
		slices.Equal(w.NamedPorts, o.NamedPorts)
}

// proxyVisible reports whether the change from old (nil if none) to w can
// change any proxy's configuration directly. A workload without IPs is no
// proxy's yet, and no node proxy is sent it. Once it has IPs, node proxies
// are sent every field of it (WDS), so any change counts.
func (w *Workload) proxyVisible(old *Workload) bool {
	if old == nil || len(old.IPs) == 0 {
		return len(w.IPs) > 0
	}
	return !old.Equal(w)
}

// Namespace is a Kubernetes Namespace; its labels matter for injection,
// revision selection and ambient mode.
type Namespace struct {
	Name   string
	Labels map[string]string
}
