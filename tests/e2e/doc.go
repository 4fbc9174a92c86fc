// Package e2e drives a whole control plane with real clients: grpc-go's xDS
// resolver and xDS server route real RPCs through what meshpilot serves,
// with config applied through kubectl to a real API server or written to a
// YAML directory.
//
// The tests with an API server of their own and a control plane in this
// process run in parallel (go test -parallel): they mostly wait on the API
// server, the control plane and the clients. The tests that run processes
// as a user would (pilot, the node proxy, the CNI agent), change the host's
// network, or measure a process's memory or a restart run one at a time,
// before them.
package e2e
