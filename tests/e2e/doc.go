// Package e2e drives a whole control plane with real clients: grpc-go's xDS
// resolver and xDS server route real RPCs through what meshpilot serves,
// with config applied through kubectl to a real API server or written to a
// YAML directory.
package e2e
