// Package webhook serves the admission webhooks and keeps their
// configurations trusting the server.
//
// Server runs the TLS listener (on :15017 by convention) and routes paths
// such as /inject and /validate to their handlers; its certificate comes
// from a CertificateSource, in the control plane the mesh CA's rotating
// serving certificate (pkg/ca), so one root covers the whole control plane
// as in istiod. NewValidationHandler answers /validate with the same
// validation the controllers use. BundlePatcher keeps the caBundle of this
// revision's webhook configurations equal to the mesh root; the control
// plane runs it on its elected leader only. This package
// keeps no CA of its own.
package webhook
