package plugin

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/meshpilot/meshpilot/pkg/cni/agentapi"
)

// Config is the plugin's entry in the conflist, as the runtime hands it over
// on stdin (with prevResult added). The installer writes it.
type Config struct {
	types.PluginConf
	// Kubeconfig is the file the plugin reads Pods and Namespaces with; the
	// installer writes it from its ServiceAccount. The plugin runs on the
	// host, outside any pod, so it has no in-cluster config of its own.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// AgentSocket is the node agent's Unix socket.
	AgentSocket string `json:"agentSocket,omitempty"`
	// AgentTimeout bounds one exchange with the agent (a Go duration).
	AgentTimeout string `json:"agentTimeout,omitempty"`
	// ExcludeNamespaces are never looked up nor captured: kube-system by
	// the installer's default, so that the cluster's own components start
	// even when the API server or the agent does not answer.
	ExcludeNamespaces []string `json:"excludeNamespaces,omitempty"`

	// prevResult is the primary plugin's result exactly as it came, which
	// ADD prints back: re-encoding it through the library's types would
	// add empty fields the primary plugin never wrote.
	prevResult json.RawMessage
	timeout    time.Duration
}

func parseConfig(stdin []byte) (*Config, error) {
	conf := &Config{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, fmt.Errorf("parse plugin config: %w", err)
	}
	var raw struct {
		PrevResult json.RawMessage `json:"prevResult"`
	}
	if err := json.Unmarshal(stdin, &raw); err != nil {
		return nil, fmt.Errorf("parse plugin config: %w", err)
	}
	if len(raw.PrevResult) > 0 && string(raw.PrevResult) != "null" {
		conf.prevResult = raw.PrevResult
	}
	if conf.AgentSocket == "" {
		conf.AgentSocket = agentapi.DefaultSocketPath
	}
	conf.timeout = agentapi.DefaultTimeout
	if conf.AgentTimeout != "" {
		d, err := time.ParseDuration(conf.AgentTimeout)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("agentTimeout %q: want a positive Go duration such as 10s", conf.AgentTimeout)
		}
		conf.timeout = d
	}
	return conf, nil
}

func (c *Config) excluded(namespace string) bool {
	for _, ns := range c.ExcludeNamespaces {
		if ns == namespace {
			return true
		}
	}
	return false
}

// k8sArgs are the keys the kubelet (through the runtime) puts in CNI_ARGS.
// The field names are the keys, which is how types.LoadArgs matches them.
type k8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          types.UnmarshallableString //nolint:revive // the key's own name
	K8S_POD_NAME               types.UnmarshallableString //nolint:revive
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString //nolint:revive
	K8S_POD_UID                types.UnmarshallableString //nolint:revive
}

func parseArgs(args string) (k8sArgs, error) {
	// Runtimes add keys of their own (IgnoreUnknown=1 among them, or not),
	// and none of them is an error for us.
	a := k8sArgs{CommonArgs: types.CommonArgs{IgnoreUnknown: true}}
	if err := types.LoadArgs(args, &a); err != nil {
		return a, fmt.Errorf("parse CNI_ARGS: %w", err)
	}
	return a, nil
}
