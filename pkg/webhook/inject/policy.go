package inject

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Labels and annotations that drive injection (Istio's names).
const (
	// LabelInjection on a namespace: "enabled" opts its Pods in to the
	// default revision.
	LabelInjection = "istio-injection"
	// LabelRevision names a revision (or a tag) on a namespace or a Pod.
	LabelRevision = "istio.io/rev"
	// LabelSidecarInject on a Pod (or, older, an annotation): "true" opts
	// in, "false" always opts out.
	LabelSidecarInject = "sidecar.istio.io/inject"
	// AnnotationStatus records what was injected; its presence marks a Pod
	// as injected.
	AnnotationStatus = "sidecar.istio.io/status"
	// AnnotationProxyConfig is YAML of a ProxyConfig merged over the mesh's
	// default proxy config.
	AnnotationProxyConfig = "proxy.istio.io/config"
	// AnnotationTemplates lists the templates to inject instead of the
	// configuration's defaultTemplates, comma-separated.
	AnnotationTemplates = "inject.istio.io/templates"

	// ProxyContainerName is the injected proxy's container.
	ProxyContainerName = "istio-proxy"
	// InitContainerName is the injected traffic-redirection init container.
	InitContainerName = "istio-init"

	// defaultRevisionName is how the default revision is named where a name
	// is needed: in istio.io/rev values and in the status annotation.
	defaultRevisionName = "default"
)

// Reasons a Pod is not injected, the reason label of skipped requests.
const (
	skipHostNetwork     = "host_network"
	skipSystemNamespace = "system_namespace"
	skipAlreadyInjected = "already_injected"
	skipOptedOut        = "opted_out"
	skipNotOptedIn      = "not_opted_in"
	skipOtherRevision   = "other_revision"
	skipPolicyDisabled  = "policy_disabled"
)

// systemNamespaces are never injected, whatever their labels say, as in
// Istio: one stray label (kubectl label namespace --all ...) would
// otherwise put iptables and a proxy in front of the cluster's own DNS and
// controllers on their next restart.
var systemNamespaces = map[string]bool{
	"kube-system":        true,
	"kube-public":        true,
	"kube-node-lease":    true,
	"local-path-storage": true,
}

type decisionInput struct {
	pod          *corev1.Pod
	nsLabels     map[string]string
	policy       policy
	revision     string
	revisionTags func() ([]string, bool)
	// confirmTag asks past revisionTags whether a tag points here; nil
	// trusts revisionTags.
	confirmTag func(tag string) bool
}

// decide returns why the Pod must not be injected, or "" to inject it.
//
// The webhook configurations' selectors already filtered the Pod; this is
// the same rule set applied again, so that a misconfigured or stale webhook
// (or a tag that moved) cannot inject a Pod that did not ask for this
// revision.
func decide(in decisionInput) string {
	pod := in.pod
	// iptables rules in a host-network Pod would rewrite the node's routing.
	if pod.Spec.HostNetwork {
		return skipHostNetwork
	}
	if systemNamespaces[pod.Namespace] {
		return skipSystemNamespace
	}
	if alreadyInjected(pod) {
		return skipAlreadyInjected
	}
	explicit := explicitInject(pod)
	if explicit == injectNo {
		return skipOptedOut
	}
	wanted, ok := requestedRevision(pod.Labels, in.nsLabels, explicit == injectYes)
	if !ok {
		return skipNotOptedIn
	}
	if !servesRevision(wanted, in.revision, in.revisionTags, in.confirmTag) {
		return skipOtherRevision
	}
	// With policy disabled only an explicit per-Pod opt-in injects.
	if in.policy == policyDisabled && explicit != injectYes {
		return skipPolicyDisabled
	}
	return ""
}

func alreadyInjected(pod *corev1.Pod) bool {
	if _, ok := pod.Annotations[AnnotationStatus]; ok {
		return true
	}
	return hasContainer(pod.Spec.Containers, ProxyContainerName) ||
		hasContainer(pod.Spec.InitContainers, ProxyContainerName)
}

func hasContainer(containers []corev1.Container, name string) bool {
	return slices.IndexFunc(containers, func(c corev1.Container) bool { return c.Name == name }) >= 0
}

type injectChoice int

const (
	injectUnset injectChoice = iota
	injectYes
	injectNo
)

// explicitInject reads sidecar.istio.io/inject, the label winning over the
// older annotation. Like Istio, YAML's spellings of true opt in and any
// other non-empty value opts out.
func explicitInject(pod *corev1.Pod) injectChoice {
	value, ok := pod.Labels[LabelSidecarInject]
	if !ok {
		value = pod.Annotations[LabelSidecarInject]
	}
	switch strings.ToLower(value) {
	case "":
		return injectUnset
	case "y", "yes", "true", "on":
		return injectYes
	default:
		return injectNo
	}
}

// requestedRevision is the revision (or tag) a Pod asks for, by the
// precedence of Istio's webhook selectors: the namespace's istio-injection
// label, then its istio.io/rev, then the Pod's istio.io/rev, then the Pod's
// sidecar.istio.io/inject=true for the default revision.
func requestedRevision(podLabels, nsLabels map[string]string, podOptIn bool) (string, bool) {
	if value, ok := nsLabels[LabelInjection]; ok {
		// Any istio-injection value other than enabled switches the
		// namespace off, whatever else is set.
		return defaultRevisionName, value == "enabled"
	}
	if rev, ok := nsLabels[LabelRevision]; ok {
		return rev, true
	}
	if rev, ok := podLabels[LabelRevision]; ok {
		return rev, true
	}
	if podOptIn {
		return defaultRevisionName, true
	}
	return "", false
}

func servesRevision(wanted, revision string, tags func() ([]string, bool), confirm func(string) bool) bool {
	own := revision
	if own == "" {
		own = defaultRevisionName
	}
	if wanted == own {
		return true
	}
	if tags == nil {
		return true
	}
	known, ok := tags()
	if !ok {
		// Not yet known which tags point here: the API server's selectors
		// sent the Pod, and skipping it would create it without a sidecar.
		return true
	}
	if slices.Contains(known, wanted) {
		return true
	}
	return confirm != nil && confirm(wanted)
}
