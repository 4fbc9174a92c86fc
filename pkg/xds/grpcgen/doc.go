// Package grpcgen turns a push context into the xDS resources (LDS, RDS, CDS,
// EDS) that proxyless gRPC clients and servers accept, using Istio's resource
// names so that existing gRPC bootstraps work unchanged.
//
// grpc-go is stricter than Envoy in places and looser in others; the shapes
// produced here follow what grpc-go v1.85 accepts (see
// shared/notes/grpc-xds-shapes.md). Generated resources that many proxies
// share (clusters, load assignments) are marshalled once and cached.
//
// Mutual TLS follows gRFC A29: clusters under ISTIO_MUTUAL and STRICT
// inbound listeners name the certificate-provider instance "default" of the
// client's bootstrap, as Istio's agent writes it (tls.go).
package grpcgen
