// Package model is meshpilot's internal vocabulary: services, endpoints,
// workloads, namespaces and Istio configs as the rest of the pipeline sees
// them, the Store that holds them, and the PushRequest that says what changed.
// It does no I/O and knows nothing of Kubernetes or xDS wire types.
package model
