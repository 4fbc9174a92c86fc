// Package plugin is meshpilot's CNI plugin: the program a container runtime
// executes, chained after the node's primary network plugin, for every pod
// sandbox it creates or deletes.
//
// It speaks CNI 0.3.0 to 1.1.0 through the containernetworking skel, so the
// protocol (environment, stdin config, result and error JSON) is the
// reference implementation's, not ours. It never changes the pod's
// networking itself: it passes the primary plugin's result through
// unchanged, and for a pod in the ambient mesh it asks the node agent (over
// pkg/cni/agentapi) to capture the pod's traffic, and waits for the answer,
// so no ambient pod starts uncaptured. Pods outside the mesh are passed
// through without a call to the agent.
package plugin
