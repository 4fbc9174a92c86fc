// Package agentapi is the wire protocol between the CNI plugin (the binary
// the container runtime executes for each pod) and the node agent (the
// long-running process beside the node proxy that installs a pod's capture).
//
// One request per connection over a Unix socket: the plugin writes one JSON
// Request, the agent answers one JSON Response when the work is done (or has
// failed), and the connection closes. A Unix socket, not TCP, so that only
// processes on the node that can open the file can ask for a capture; the
// agent's socket is created 0600 by Listen.
//
// The plugin side is Call; the agent side is Listen and Serve with a Handler.
// This package imports nothing from the control plane, and nothing but the
// standard library, so both sides can depend on it cheaply.
package agentapi
