package webhook

// ServiceNameFor is the control plane's Service for a revision: istiod, or
// istiod-REV. The webhooks and 15012 are reached through it.
func ServiceNameFor(revision string) string {
	if revision == "" {
		return "istiod"
	}
	return "istiod-" + revision
}

// ValidatorConfigName is the ValidatingWebhookConfiguration of a revision
// installed in namespace: istio-validator[-REV]-NAMESPACE.
func ValidatorConfigName(revision, namespace string) string {
	if revision == "" {
		return "istio-validator-" + namespace
	}
	return "istio-validator-" + revision + "-" + namespace
}

// RevisionLabelValue is the istio.io/rev value of a revision's objects.
func RevisionLabelValue(revision string) string {
	if revision == "" {
		return "default"
	}
	return revision
}
