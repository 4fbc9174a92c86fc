// Package webhook serves the admission webhooks and keeps their serving
// certificate.
//
// Server runs the TLS listener (on :15017 by convention) and routes paths
// such as /inject and /validate to their handlers. NewValidationHandler
// answers /validate with the same DestinationRule validation the
// controllers use. CertManager keeps a self-signed CA in a Secret, issues
// the serving certificate from it, rotates that certificate before it
// expires and patches the CA into the webhook configurations, as istiod
// does; without a Kubernetes client it keeps the CA in memory instead.
package webhook
