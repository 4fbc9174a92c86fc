// Package helm tests the Helm charts under charts/ the way users meet them:
// helm lint, helm template (golden), every rendered object checked by a real
// API server, the committed manifests/ kept fresh, and the RBAC rules proven
// sufficient (and necessary) by running the control plane with the chart's
// own ServiceAccount token.
package helm
