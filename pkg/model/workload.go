package model

import (
	"maps"
	"slices"
)

// Workload is a Pod: where it runs, who it is, and its labels. Proxies may
// read only its name, namespace, IPs and labels through the push context:
// the store does not announce changes of the rest (see proxyVisible), so
// the push context may hold an older version of them.
type Workload struct {
	Name           string
	Namespace      string
	IPs            []string
	Labels         map[string]string
	ServiceAccount string
	NodeName       string
	Locality       Locality
}

// Key identifies the workload in the store.
func (w *Workload) Key() NamespacedName {
	return NamespacedName{Namespace: w.Namespace, Name: w.Name}
}

// proxyVisible reports whether the change from old (nil if none) to w can
// change any proxy's configuration directly. A proxy finds its workload by
// IP, and the services that select it by its labels: a workload without IPs
// is no proxy's yet. Its service account, node and locality reach proxies
// only through the endpoints that target it, which sources re-emit.
func (w *Workload) proxyVisible(old *Workload) bool {
	if old == nil || len(old.IPs) == 0 {
		return len(w.IPs) > 0
	}
	return !slices.Equal(old.IPs, w.IPs) || !maps.Equal(old.Labels, w.Labels)
}

// Namespace is a Kubernetes Namespace; its labels matter for injection and
// revision selection.
type Namespace struct {
	Name   string
	Labels map[string]string
}
