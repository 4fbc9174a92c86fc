package membership

// Ambient mode's labels and the sidecar's status, Istio's names. They
// repeat pkg/model's on purpose: this is data plane, which imports no
// control-plane package, and the names are Istio's API, which does not
// change under us.
const (
	DataplaneModeLabel = "istio.io/dataplane-mode"
	ModeAmbient        = "ambient"
	ModeNone           = "none"
	// SidecarStatusAnnotation is what sidecar injection writes on a Pod.
	SidecarStatusAnnotation = "sidecar.istio.io/status"
)

// Ambient reports whether a pod is to be captured for ambient mode, by the
// control plane's rule (its own label says ambient, or its namespace's
// does and its own does not say none), and, as istio-cni decides, only
// when it has no injected sidecar: a sidecar's own redirection and ours in
// one namespace would send its traffic through both proxies, or in a loop.
func Ambient(podLabels, podAnnotations, namespaceLabels map[string]string) bool {
	if _, ok := podAnnotations[SidecarStatusAnnotation]; ok {
		return false
	}
	switch podLabels[DataplaneModeLabel] {
	case ModeAmbient:
		return true
	case ModeNone:
		return false
	}
	return namespaceLabels[DataplaneModeLabel] == ModeAmbient
}
