package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/meshpilot/meshpilot/pkg/cni/agentapi"
)

// SupportedVersions are the CNI spec versions the plugin speaks: every one
// with chaining (prevResult came in 0.3.0). The runtime hands a chained
// plugin the conflist's version and the skel refuses any other, failing
// every pod on the node, so a version left out here is not one we skip but
// one whose nodes start no pod at all; Calico, Flannel and Cilium write
// 0.3.1.
var SupportedVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// ErrCodeAgentRefused is our CNI error code (plugin codes start at 100)
// for a node agent that answered but could not capture the pod.
const ErrCodeAgentRefused uint = 100

// Plugin is the plugin's logic, with its dependencies injectable.
type Plugin struct {
	// Pods returns where to read pod metadata for a config; nil means the
	// API server through the config's kubeconfig.
	Pods func(conf *Config) (Pods, error)
	// Stdout receives ADD's result; nil means os.Stdout.
	Stdout io.Writer
	// Log receives what the runtime does not show: decisions, and DEL
	// failures that must not fail DEL. nil means stderr.
	Log *slog.Logger
}

// Main runs the plugin as the runtime executes it: the command from
// CNI_COMMAND, the config from stdin, the result or error JSON on stdout,
// and it exits the process.
func Main(about string) {
	p := &Plugin{}
	skel.PluginMainFuncs(skel.CNIFuncs{Add: p.Add, Check: p.Check, Del: p.Del, GC: p.GC, Status: p.Status},
		version.PluginSupports(SupportedVersions...), about)
}

func (p *Plugin) log() *slog.Logger {
	if p.Log != nil {
		return p.Log
	}
	return slog.New(slog.NewTextHandler(os.Stderr, nil)).With("plugin", "meshpilot-cni")
}

func (p *Plugin) pods(conf *Config) (Pods, error) {
	if p.Pods != nil {
		return p.Pods(conf)
	}
	return NewKubePods(conf.Kubeconfig)
}

// pod is one invocation's pod, once its config and args are read.
type pod struct {
	conf            *Config
	namespace, name string
	uidArg          string
}

// load reads the config and CNI_ARGS. A nil pod with no error means the
// sandbox is not a Kubernetes pod we may look at (no pod name, or an
// excluded namespace), which the plugin passes through.
func load(args *skel.CmdArgs) (*Config, *pod, error) {
	conf, err := parseConfig(args.StdinData)
	if err != nil {
		return nil, nil, types.NewError(types.ErrDecodingFailure, err.Error(), "")
	}
	k, err := parseArgs(args.Args)
	if err != nil {
		return nil, nil, types.NewError(types.ErrInvalidEnvironmentVariables, err.Error(), "")
	}
	ns, name := string(k.K8S_POD_NAMESPACE), string(k.K8S_POD_NAME)
	if ns == "" || name == "" || conf.excluded(ns) {
		return conf, nil, nil
	}
	return conf, &pod{conf: conf, namespace: ns, name: name, uidArg: string(k.K8S_POD_UID)}, nil
}

// Add passes the primary plugin's result through, after the node agent has
// captured an ambient pod.
func (p *Plugin) Add(args *skel.CmdArgs) error {
	conf, pd, err := load(args)
	if err != nil {
		return err
	}
	// A chained plugin always has a result before it; without one we are
	// first in the list, a broken conflist that must not start pods.
	if conf.prevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig,
			"meshpilot-cni must be chained after the primary network plugin: no prevResult", "")
	}
	podIPs, err := prevResultIPs(conf)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, "parse prevResult: "+err.Error(), "")
	}
	if pd != nil {
		if err := p.addPod(args, pd, podIPs); err != nil {
			return err
		}
	}
	return p.printResult(conf)
}

func (p *Plugin) addPod(args *skel.CmdArgs, pd *pod, podIPs []netip.Addr) error {
	ctx, cancel := context.WithTimeout(context.Background(), pd.conf.timeout)
	defer cancel()
	info, err := p.membership(ctx, pd)
	if err != nil {
		return err
	}
	if !info.Ambient() {
		p.log().Debug("pod not in the ambient mesh, passed through", "pod", pd.namespace+"/"+pd.name)
		return nil
	}
	req := agentapi.Request{Command: agentapi.CommandAdd, PodNamespace: pd.namespace, PodName: pd.name,
		PodUID: info.UID, Netns: args.Netns, ContainerID: args.ContainerID, IfName: args.IfName, PodIPs: podIPs}
	if err := agentError(agentapi.Call(ctx, pd.conf.AgentSocket, req), pd, "capture", "pod not started without its capture"); err != nil {
		return err
	}
	p.log().Info("ambient pod captured by the node agent", "pod", pd.namespace+"/"+pd.name, "netns", args.Netns)
	return nil
}

// agentError turns the agent's answer to a request about pd into the CNI
// error the runtime shows; nil when the agent confirmed. what completes
// "could not ... pod ns/name"; outcome says what an unanswered request
// means for the pod.
func agentError(err error, pd *pod, what, outcome string) error {
	var unreachable *agentapi.UnreachableError
	var refused *agentapi.RefusedError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &unreachable):
		return types.NewError(types.ErrTryAgainLater,
			fmt.Sprintf("meshpilot node agent unreachable at %s: %s", pd.conf.AgentSocket, outcome),
			unreachable.Err.Error())
	case errors.As(err, &refused):
		return types.NewError(ErrCodeAgentRefused,
			fmt.Sprintf("meshpilot node agent could not %s pod %s/%s: %s", what, pd.namespace, pd.name, refused.Reason), "")
	default:
		return types.NewError(types.ErrTryAgainLater,
			fmt.Sprintf("meshpilot node agent at %s did not answer for pod %s/%s: %s",
				pd.conf.AgentSocket, pd.namespace, pd.name, outcome), err.Error())
	}
}

// membership reads the pod for ADD and CHECK. Without its labels we cannot
// tell a mesh pod from another, and starting an ambient pod uncaptured is
// the one thing we must not do, so a failed read is a try-again error: the
// kubelet retries.
func (p *Plugin) membership(ctx context.Context, pd *pod) (PodInfo, error) {
	info, err := p.lookup(ctx, pd)
	if err != nil {
		return PodInfo{}, types.NewError(types.ErrTryAgainLater,
			fmt.Sprintf("meshpilot-cni: read pod %s/%s from the API server: %v", pd.namespace, pd.name, err),
			"cannot tell whether the pod is in the ambient mesh")
	}
	return info, nil
}

func (p *Plugin) lookup(ctx context.Context, pd *pod) (PodInfo, error) {
	pods, err := p.pods(pd.conf)
	if err != nil {
		return PodInfo{}, err
	}
	info, err := pods.Get(ctx, pd.namespace, pd.name)
	if err != nil {
		return PodInfo{}, err
	}
	if info.UID == "" {
		info.UID = pd.uidArg
	}
	return info, nil
}

// Check verifies that the config and the primary plugin's result are
// readable and, for a pod in the ambient mesh, asks the node agent whether
// its capture is still whole: the rules in the pod's namespace and the
// proxy's listeners there. Pods outside the mesh have nothing of ours.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	conf, pd, err := load(args)
	if err != nil {
		return err
	}
	if conf.prevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "meshpilot-cni: CHECK without a prevResult", "")
	}
	if _, err := prevResultIPs(conf); err != nil {
		return types.NewError(types.ErrDecodingFailure, "parse prevResult: "+err.Error(), "")
	}
	if pd == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), pd.conf.timeout)
	defer cancel()
	info, err := p.membership(ctx, pd)
	if err != nil {
		return err
	}
	if !info.Ambient() {
		return nil
	}
	req := agentapi.Request{Command: agentapi.CommandCheck, PodNamespace: pd.namespace, PodName: pd.name,
		PodUID: info.UID, Netns: args.Netns, ContainerID: args.ContainerID, IfName: args.IfName}
	return agentError(agentapi.Call(ctx, pd.conf.AgentSocket, req), pd, "confirm the capture of", "the capture cannot be confirmed")
}

// Del tells the agent the sandbox is going away, and never fails for the
// agent's sake: DEL must succeed for the runtime to free the sandbox, the
// namespace (and so the capture in it) goes with the sandbox anyway, and
// the agent notices departed pods through the API server too.
func (p *Plugin) Del(args *skel.CmdArgs) error {
	_, pd, err := load(args)
	if err != nil || pd == nil {
		// An unreadable config on DEL is logged, not returned: a DEL that
		// fails forever leaks the sandbox.
		if err != nil {
			p.log().Warn("DEL: config or args unreadable, nothing done", "err", err)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), pd.conf.timeout)
	defer cancel()
	uid := pd.uidArg
	// The Pod is usually gone from the API server by now; only a Pod we can
	// still read and that is outside the mesh spares the agent the call.
	if info, err := p.lookup(ctx, pd); err == nil {
		if !info.Ambient() {
			return nil
		}
		uid = info.UID
	}
	req := agentapi.Request{Command: agentapi.CommandDel, PodNamespace: pd.namespace, PodName: pd.name,
		PodUID: uid, Netns: args.Netns, ContainerID: args.ContainerID, IfName: args.IfName}
	if err := agentapi.Call(ctx, pd.conf.AgentSocket, req); err != nil {
		p.log().Warn("DEL: node agent not told; the sandbox is removed anyway",
			"pod", pd.namespace+"/"+pd.name, "err", err)
	}
	return nil
}

// GC (CNI 1.1.0) has nothing to collect: the capture lives in a sandbox's
// own namespace and goes with it, and the agent drops the pods that leave
// WDS.
func (p *Plugin) GC(*skel.CmdArgs) error { return nil }

// Status (CNI 1.1.0) is always ready: pods outside the mesh never depend on
// the node agent, and an ambient pod's ADD fails on its own, with a
// try-again error, while the agent is down. Reporting the agent here would
// mark the whole node's network not ready for the sake of some pods.
func (p *Plugin) Status(*skel.CmdArgs) error { return nil }

func (p *Plugin) printResult(conf *Config) error {
	w := p.Stdout
	if w == nil {
		w = os.Stdout
	}
	_, err := w.Write(conf.prevResult)
	return err
}

// prevResultIPs parses the primary plugin's result with the library (in
// whatever version it came) and returns the pod's addresses.
func prevResultIPs(conf *Config) ([]netip.Addr, error) {
	if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
		return nil, err
	}
	res, err := types100.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	for _, ipc := range res.IPs {
		if a, ok := netip.AddrFromSlice(ipc.Address.IP); ok {
			ips = append(ips, a.Unmap())
		}
	}
	return ips, nil
}
