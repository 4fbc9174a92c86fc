// Package ca is meshpilot's certificate authority: an Istio-compatible
// istio.v1.auth.IstioCertificateService (istio.io/api security/v1alpha1).
//
// It has these parts, each in its own file:
//
//   - The root of trust (root.go, keys.go, certchain.go). An Authority
//     holds the signing key and certificate, and of cert-chain.pem only the
//     path from it to the root. LoadOrCreate takes them from the Secret
//     `cacerts` (a plugged-in CA, in Istio's file layout) when it exists,
//     and otherwise from the Secret `istio-ca-secret`, which it creates
//     with a self-signed root if absent. Replicas that race to create it converge on the one
//     that won the create.
//   - Reloading the root (keeper.go). A Keeper holds the Authority in use
//     and watches both Secrets (namespace-scoped informers, by name): new
//     valid key material replaces it without a restart and its subscribers
//     are told; material not valid yet replaces it a minute after its
//     NotBefore; invalid material is refused, logged and counted, and the
//     working Authority stays.
//   - Signing (sign.go). Authority.Sign turns a CSR into a leaf for exactly
//     one SPIFFE identity, refusing malformed, oversized, unsigned or
//     weak-keyed CSRs, CSRs that name another identity, and lifetimes above
//     the maximum. No leaf outlives the CA's chain, and a CA whose chain
//     has expired signs nothing (validity.go).
//   - Proving who the caller is (authn.go, impersonation.go). A caller is
//     authenticated by a Kubernetes ServiceAccount token checked with
//     TokenReview, or by a client certificate this CA issued. A node proxy
//     in the trusted node accounts may ask for the identity of a pod on its
//     own node.
//   - Serving certificates (serving.go, servingcert.go) for the control
//     plane's own TLS listeners (15012, the webhooks), from the same root,
//     so one root covers the whole mesh. RotatingServingCert renews one at
//     80% of its lifetime and whenever the root changes.
//   - The gRPC service (server.go) and its metrics (metrics.go), named as
//     istiod's are (citadel_server_*, including the root and cert-chain
//     expiry gauges), so existing dashboards keep working.
//   - Publishing the root (rootcert.go): the ConfigMap istio-ca-root-cert
//     (the certificates of root-cert.pem encoded anew, never the file) in
//     every namespace, repaired when edited or deleted and rewritten
//     when the root changes, so workloads can trust the CA before they hold
//     a certificate. The control plane runs it on its elected leader only.
//
// Identity only ever comes from what the caller proves, never from the CSR
// or from node metadata. Private keys are never logged.
package ca
