package tags

import (
	"encoding/json"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// AnnotationSavedSelectors holds, on a deactivated injector, the
	// selectors each of its webhooks had before deactivation (JSON keyed by
	// webhook name), so that restoring is exact.
	AnnotationSavedSelectors = "meshpilot.io/deactivated-selectors"

	// LabelDeactivated and NeverMatchValue form the selector that a
	// deactivated webhook carries. Nothing is labelled this way, so the
	// webhook matches nothing while the object stays in place.
	LabelDeactivated = "istio.io/deactivated"
	NeverMatchValue  = "never-match"
)

// savedSelectors is one webhook's selectors as kept in
// AnnotationSavedSelectors.
type savedSelectors struct {
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	ObjectSelector    *metav1.LabelSelector `json:"objectSelector,omitempty"`
}

// NeverMatch returns a selector that matches no object.
func NeverMatch() *metav1.LabelSelector {
	return selector(in(LabelDeactivated, NeverMatchValue))
}

// IsDeactivated reports whether injector was deactivated by Deactivate.
func IsDeactivated(injector *admissionregistrationv1.MutatingWebhookConfiguration) bool {
	_, ok := injector.Annotations[AnnotationSavedSelectors]
	return ok
}

// Deactivate returns a copy of injector whose webhooks match nothing, with
// their original selectors saved in AnnotationSavedSelectors. The object is
// kept rather than deleted so that the non-revisioned control plane can be
// made the default again without reinstalling it. Deactivating an injector
// that already is deactivated returns an unchanged copy: saving again would
// overwrite the originals with the never-match selectors.
func Deactivate(injector *admissionregistrationv1.MutatingWebhookConfiguration) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	out := injector.DeepCopy()
	if IsDeactivated(injector) {
		return out, nil
	}
	saved := make(map[string]savedSelectors, len(out.Webhooks))
	for i := range out.Webhooks {
		wh := &out.Webhooks[i]
		saved[wh.Name] = savedSelectors{NamespaceSelector: wh.NamespaceSelector, ObjectSelector: wh.ObjectSelector}
		wh.NamespaceSelector = NeverMatch()
		wh.ObjectSelector = NeverMatch()
	}
	raw, err := json.Marshal(saved)
	if err != nil {
		return nil, fmt.Errorf("save selectors of %s: %w", injector.Name, err)
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[AnnotationSavedSelectors] = string(raw)
	return out, nil
}

// Restore undoes Deactivate: it returns a copy of injector with the saved
// selectors back on their webhooks and the annotation removed. An injector
// that is not deactivated comes back unchanged. A webhook with no saved
// entry (added after deactivation) keeps the selectors it has.
func Restore(injector *admissionregistrationv1.MutatingWebhookConfiguration) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	out := injector.DeepCopy()
	raw, ok := injector.Annotations[AnnotationSavedSelectors]
	if !ok {
		return out, nil
	}
	var saved map[string]savedSelectors
	if err := json.Unmarshal([]byte(raw), &saved); err != nil {
		return nil, fmt.Errorf("annotation %s on %s is not valid: %w", AnnotationSavedSelectors, injector.Name, err)
	}
	for i := range out.Webhooks {
		wh := &out.Webhooks[i]
		if s, ok := saved[wh.Name]; ok {
			wh.NamespaceSelector = s.NamespaceSelector
			wh.ObjectSelector = s.ObjectSelector
		}
	}
	delete(out.Annotations, AnnotationSavedSelectors)
	if len(out.Annotations) == 0 {
		out.Annotations = nil
	}
	return out, nil
}
