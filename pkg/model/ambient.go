package model

// Ambient mode labels and annotations, Istio's names.
const (
	// DataplaneModeLabel on a Namespace or Pod asks for ambient mode
	// (value DataplaneModeAmbient); on a Pod, DataplaneModeNone opts it
	// out of its namespace's ambient mode.
	DataplaneModeLabel   = "istio.io/dataplane-mode"
	DataplaneModeAmbient = "ambient"
	DataplaneModeNone    = "none"
	// AmbientRedirectionAnnotation is written on a Pod by the CNI agent,
	// with the value AmbientRedirectionEnabled, once the Pod's traffic is
	// captured by the node proxy.
	AmbientRedirectionAnnotation = "ambient.istio.io/redirection"
	AmbientRedirectionEnabled    = "enabled"
	// NetworkLabel, on the control plane's namespace, names the cluster's
	// network, which every address WDS sends is on (istiod's ambient
	// rule; a Pod's own label is not read).
	NetworkLabel = "topology.istio.io/network"
)

// AmbientEnabled reports whether a Pod with these labels, in a namespace
// with nsLabels, is asked to be in ambient mode: its own label says
// ambient, or its namespace's does and its own does not say none.
func AmbientEnabled(podLabels, nsLabels map[string]string) bool {
	switch podLabels[DataplaneModeLabel] {
	case DataplaneModeAmbient:
		return true
	case DataplaneModeNone:
		return false
	}
	return nsLabels[DataplaneModeLabel] == DataplaneModeAmbient
}

// Canonical service labels, and the ones Istio falls back to, in order.
var (
	canonicalNameLabels     = []string{"service.istio.io/canonical-name", "app.kubernetes.io/name", "app"}
	canonicalRevisionLabels = []string{"service.istio.io/canonical-revision", "app.kubernetes.io/version", "version"}
)

// CanonicalService returns the canonical service name and revision of a
// workload with these labels: the first label present of each list above,
// else the workload's name and "latest".
func CanonicalService(labels map[string]string, workloadName string) (name, revision string) {
	name, revision = workloadName, "latest"
	for _, k := range canonicalNameLabels {
		if v, ok := labels[k]; ok {
			name = v
			break
		}
	}
	for _, k := range canonicalRevisionLabels {
		if v, ok := labels[k]; ok {
			revision = v
			break
		}
	}
	return name, revision
}
