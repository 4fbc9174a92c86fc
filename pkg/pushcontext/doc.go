// Package pushcontext builds the immutable snapshot that xDS generators read:
// services indexed by hostname, name and namespace visibility, endpoints by
// service, port and subset, destination rules resolved per host with Istio's
// lookup order and workloadSelector semantics, workloads by IP with the
// services that select them, and the ingress gateway's configuration merged
// from the Kubernetes Ingresses the mesh owns. Reads never lock; a new
// snapshot reuses every index whose inputs did not change (and each
// Ingress's translation whose inputs did not), and endpoint-only changes
// swap one service's endpoint entry in place.
package pushcontext
