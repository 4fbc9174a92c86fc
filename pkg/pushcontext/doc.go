// Package pushcontext builds the immutable snapshot that xDS generators read:
// services indexed by hostname, name and namespace visibility, endpoints by
// service, port and subset, destination rules resolved per host with Istio's
// lookup order and workloadSelector semantics, and workloads by IP with the
// services that select them. Reads never lock; a new snapshot reuses every
// index whose inputs did not change, and endpoint-only changes swap one
// service's endpoint entry in place.
package pushcontext
