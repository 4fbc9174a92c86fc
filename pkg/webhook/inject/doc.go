// Package inject is the sidecar injection webhook: an http.Handler for
// admission.k8s.io/v1 AdmissionReviews of Pods that decides, by Istio's
// opt-in rules, whether a Pod gets a proxy, renders the injection template
// from the mounted istio-sidecar-injector ConfigMap, and answers with a
// JSONPatch that adds the proxy, its init container, volumes and the
// sidecar.istio.io/status annotation.
package inject
