package tags

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Labels and values shared with the injector configurations and the chart.
const (
	// LabelTag names the tag a webhook configuration implements.
	LabelTag = "istio.io/tag"
	// LabelRev is the revision a webhook configuration (or namespace, or pod)
	// belongs to.
	LabelRev = "istio.io/rev"
	// LabelApp marks every injection webhook configuration.
	LabelApp = "app"
	// AppSidecarInjector is LabelApp's value on injection configurations.
	AppSidecarInjector = "sidecar-injector"

	// LabelInjection is the legacy namespace opt-in of the default revision.
	LabelInjection = "istio-injection"
	// LabelPodInject is the pod-level opt-in and opt-out.
	LabelPodInject = "sidecar.istio.io/inject"

	// DefaultTag is the tag that also takes the legacy opt-in labels.
	DefaultTag = "default"
	// DefaultRevision is the istio.io/rev value of the non-revisioned
	// control plane.
	DefaultRevision = "default"

	// IstioSystem is the namespace whose objects carry no namespace suffix.
	IstioSystem = "istio-system"

	injectorBaseName = "istio-sidecar-injector"
	tagWebhookPrefix = "istio-revision-tag-"
	injectionSuffix  = "sidecar-injector.istio.io"
)

// Webhook names inside an injection configuration (Istio's four-way split).
const (
	WebhookRevNamespace = "rev.namespace." + injectionSuffix
	WebhookRevObject    = "rev.object." + injectionSuffix
	WebhookNamespace    = "namespace." + injectionSuffix
	WebhookObject       = "object." + injectionSuffix
)

// NormalizeRevision maps the empty revision to DefaultRevision, the value
// the non-revisioned control plane carries in istio.io/rev.
func NormalizeRevision(rev string) string {
	if rev == "" {
		return DefaultRevision
	}
	return rev
}

// InjectorName is the name of revision rev's injection configuration:
// istio-sidecar-injector for the default revision, else
// istio-sidecar-injector-REV. A control plane outside istio-system appends
// its namespace, as Istio's chart does, because the object is cluster-scoped.
func InjectorName(rev, istioNamespace string) string {
	name := injectorBaseName
	if rev = NormalizeRevision(rev); rev != DefaultRevision {
		name += "-" + rev
	}
	return withNamespace(name, istioNamespace)
}

// TagWebhookName is the name of tag's webhook configuration,
// istio-revision-tag-TAG (namespace-suffixed outside istio-system).
func TagWebhookName(tag, istioNamespace string) string {
	return withNamespace(tagWebhookPrefix+tag, istioNamespace)
}

func withNamespace(name, ns string) string {
	if ns == "" || ns == IstioSystem {
		return name
	}
	return name + "-" + ns
}

// ValidateTag checks that tag can be a label value and part of an object
// name, which it must be for both the webhook name and istio.io/rev=TAG.
func ValidateTag(tag string) error {
	return validateName("tag", tag, TagWebhookName(tag, ""))
}

// ValidateRevision checks rev the same way for the injector's name.
func ValidateRevision(rev string) error {
	return validateName("revision", rev, InjectorName(rev, ""))
}

func validateName(what, value, objectName string) error {
	if value == "" {
		return fmt.Errorf("%s must not be empty", what)
	}
	problems := validation.IsDNS1123Label(value)
	problems = append(problems, validation.IsDNS1123Subdomain(objectName)...)
	if len(problems) > 0 {
		return fmt.Errorf("invalid %s %q: %s", what, value, strings.Join(problems, "; "))
	}
	return nil
}
