package model

// Workload is a Pod: where it runs, who it is, and its labels.
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

// Namespace is a Kubernetes Namespace; its labels matter for injection and
// revision selection.
type Namespace struct {
	Name   string
	Labels map[string]string
}
