package agentapi

import (
	"context"
	"net/netip"
)

// DefaultSocketPath is where the node agent listens unless told otherwise,
// in the plugin's config (agentSocket) and the agent's flags.
const DefaultSocketPath = "/var/run/meshpilot/cni.sock"

// Command is what the plugin asks for; the names are the CNI commands that
// cause them.
type Command string

const (
	// CommandAdd asks the agent to capture a new pod's traffic. The plugin
	// does not let the pod start until the agent has answered OK.
	CommandAdd Command = "ADD"
	// CommandDel tells the agent the pod's sandbox is going away. It must be
	// idempotent: the runtime repeats DEL, and may send it for a pod the
	// agent never saw.
	CommandDel Command = "DEL"
	// CommandCheck asks whether the pod's capture is still whole: the rules
	// in its namespace and the proxy's listeners there. The agent answers,
	// it does not repair; the runtime decides what a failed CHECK means.
	CommandCheck Command = "CHECK"
)

// Request is what the plugin sends. Field names follow the CNI environment
// and Kubernetes' CNI_ARGS.
type Request struct {
	Command      Command `json:"command"`
	PodNamespace string  `json:"podNamespace"`
	PodName      string  `json:"podName"`
	// PodUID is set when the plugin could read it from the API server; the
	// agent should prefer it to the name, which a new pod may reuse.
	PodUID string `json:"podUID,omitempty"`
	// Netns is the path of the pod's network namespace (CNI_NETNS), which
	// the agent enters to install or inspect the capture. It may be empty
	// on DEL, when the runtime has already removed the namespace.
	Netns       string `json:"netns"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifname"`
	// PodIPs are the addresses the primary plugin gave the pod, from its
	// result (the CNI prevResult); empty on DEL.
	PodIPs []netip.Addr `json:"podIPs,omitempty"`
}

// Response is the agent's answer. OK false carries the reason in Error,
// which the plugin shows the runtime (and so kubectl describe pod).
type Response struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Handler does the agent's work for one request. Returning nil confirms it;
// an error is sent back as the reason. The context ends when the plugin's
// deadline passes or the server is closed.
type Handler interface {
	HandleCNI(ctx context.Context, req Request) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req Request) error

// HandleCNI calls f.
func (f HandlerFunc) HandleCNI(ctx context.Context, req Request) error { return f(ctx, req) }
