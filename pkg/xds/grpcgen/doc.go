// Package grpcgen turns a push context into the xDS resources (LDS, RDS, CDS,
// EDS) that proxyless gRPC clients and servers accept, using Istio's resource
// names so that existing gRPC bootstraps work unchanged.
//
// grpc-go is stricter than Envoy in places and looser in others; the shapes
// produced here follow what grpc-go v1.85 accepts (see
// shared/notes/grpc-xds-shapes.md). Generated resources that many proxies
// share (clusters, load assignments) are marshalled once and cached.
package grpcgen
