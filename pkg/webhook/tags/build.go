package tags

import (
	"errors"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// webhookShape is one webhook of a tag configuration: its name and whom it
// selects. Everything else is taken from the revision's injector.
type webhookShape struct {
	name      string
	namespace *metav1.LabelSelector
	object    *metav1.LabelSelector
}

// tagShapes lists the webhooks of tag's configuration with their
// selectors, following Istio's split so that exactly one webhook matches any
// opted-in pod:
//   - rev.namespace: the namespace carries istio.io/rev=TAG (and no
//     istio-injection label, which takes precedence);
//   - rev.object: the namespace has neither label and the pod carries
//     istio.io/rev=TAG;
//   - for the default tag also namespace (istio-injection=enabled) and
//     object (the pod says sidecar.istio.io/inject=true and nothing names a
//     revision).
//
// A pod labelled sidecar.istio.io/inject=false is never selected.
func tagShapes(tag string) []webhookShape {
	shapes := []webhookShape{
		{
			name:      WebhookRevNamespace,
			namespace: selector(in(LabelRev, tag), absent(LabelInjection)),
			object:    selector(notIn(LabelPodInject, "false")),
		},
		{
			name:      WebhookRevObject,
			namespace: selector(absent(LabelRev), absent(LabelInjection)),
			object:    selector(notIn(LabelPodInject, "false"), in(LabelRev, tag)),
		},
	}
	if tag != DefaultTag {
		return shapes
	}
	return append(shapes,
		webhookShape{
			name:      WebhookNamespace,
			namespace: selector(in(LabelInjection, "enabled")),
			object:    selector(notIn(LabelPodInject, "false")),
		},
		webhookShape{
			name:      WebhookObject,
			namespace: selector(absent(LabelInjection), absent(LabelRev)),
			object:    selector(in(LabelPodInject, "true"), absent(LabelRev)),
		},
	)
}

// BuildTagWebhook returns the MutatingWebhookConfiguration that implements
// tag for revision rev, given that revision's injector configuration. Each
// tag webhook copies the injector's webhook of the same name (or, failing
// that, its first injection webhook) — clientConfig with caBundle, rules,
// failure and reinvocation policies — and replaces only the name and the
// selectors. The result is named istio-revision-tag-TAG and labelled
// istio.io/tag=TAG, istio.io/rev=REV and app=sidecar-injector.
//
// Callers should check the injector with CheckInjector first: an injector
// without webhooks yields webhooks without a clientConfig.
func BuildTagWebhook(tag, rev string, injector *admissionregistrationv1.MutatingWebhookConfiguration) *admissionregistrationv1.MutatingWebhookConfiguration {
	shapes := tagShapes(tag)
	out := &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta: metav1.TypeMeta{
			APIVersion: admissionregistrationv1.SchemeGroupVersion.String(),
			Kind:       "MutatingWebhookConfiguration",
		},
		ObjectMeta: metav1.ObjectMeta{
			Name: TagWebhookName(tag, ""),
			Labels: map[string]string{
				LabelTag: tag,
				LabelRev: NormalizeRevision(rev),
				LabelApp: AppSidecarInjector,
			},
		},
		Webhooks: make([]admissionregistrationv1.MutatingWebhook, 0, len(shapes)),
	}
	for _, shape := range shapes {
		var wh admissionregistrationv1.MutatingWebhook
		if tmpl := templateWebhook(injector, shape.name); tmpl != nil {
			tmpl.DeepCopyInto(&wh)
		}
		wh.Name = shape.name
		wh.NamespaceSelector = shape.namespace
		wh.ObjectSelector = shape.object
		out.Webhooks = append(out.Webhooks, wh)
	}
	return out
}

// CheckInjector reports why injector cannot serve as the template of a tag.
func CheckInjector(injector *admissionregistrationv1.MutatingWebhookConfiguration) error {
	if injector == nil {
		return errors.New("no injector configuration")
	}
	if templateWebhook(injector, "") == nil {
		return fmt.Errorf("MutatingWebhookConfiguration %s has no webhooks to copy", injector.Name)
	}
	return nil
}

// templateWebhook picks the injector webhook that a tag webhook named name
// copies: the one with the same name, else the first injection webhook,
// else the first webhook at all.
func templateWebhook(injector *admissionregistrationv1.MutatingWebhookConfiguration, name string) *admissionregistrationv1.MutatingWebhook {
	if injector == nil || len(injector.Webhooks) == 0 {
		return nil
	}
	for i := range injector.Webhooks {
		if injector.Webhooks[i].Name == name {
			return &injector.Webhooks[i]
		}
	}
	for i := range injector.Webhooks {
		if strings.HasSuffix(injector.Webhooks[i].Name, injectionSuffix) {
			return &injector.Webhooks[i]
		}
	}
	return &injector.Webhooks[0]
}

func selector(exprs ...metav1.LabelSelectorRequirement) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: exprs}
}

func in(key string, values ...string) metav1.LabelSelectorRequirement {
	return metav1.LabelSelectorRequirement{Key: key, Operator: metav1.LabelSelectorOpIn, Values: values}
}

func notIn(key string, values ...string) metav1.LabelSelectorRequirement {
	return metav1.LabelSelectorRequirement{Key: key, Operator: metav1.LabelSelectorOpNotIn, Values: values}
}

func absent(key string) metav1.LabelSelectorRequirement {
	return metav1.LabelSelectorRequirement{Key: key, Operator: metav1.LabelSelectorOpDoesNotExist}
}
