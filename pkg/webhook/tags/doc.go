// Package tags manages revision tags: stable aliases (such as `prod` or
// `default`) that route sidecar injection to one control-plane revision, so
// that moving namespaces to a new revision means retargeting a tag rather
// than relabelling every namespace.
//
// A tag is a MutatingWebhookConfiguration named istio-revision-tag-TAG that
// reuses the injection webhooks of its revision but matches objects labelled
// istio.io/rev=TAG. The pure builders here produce those objects (the Helm
// chart renders the same ones); Manager applies them through the Kubernetes
// API, including deactivating and later restoring the non-revisioned
// injector when the `default` tag moves to a revision.
package tags
