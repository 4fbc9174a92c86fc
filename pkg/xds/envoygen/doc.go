// Package envoygen generates Envoy configuration (CDS, LDS, RDS, EDS, SDS) for
// sidecars and routers from a push context, translating every
// DestinationRule feature with Istio's semantics. Generators are pure
// functions of (push context, proxy) and share their output between
// identical proxies.
package envoygen
