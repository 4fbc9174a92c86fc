package nodeproxy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshpilot/meshpilot/pkg/capture"
	"github.com/meshpilot/meshpilot/pkg/cni/agentapi"
	"github.com/meshpilot/meshpilot/pkg/netns"
	"github.com/meshpilot/meshpilot/pkg/workloadapi"
)

// RedirectionAnnotation is what the agent writes on a Pod once its capture
// and listeners are in place, as istio-cni does; from then on the control
// plane sends the workload with HBONE, so peers start tunnelling to it.
const RedirectionAnnotation = "ambient.istio.io/redirection"

// capturePorts are the node proxy's own ports, which the capture sends a
// pod's traffic to.
var capturePorts = capture.Ports{Outbound: OutboundPort, Inbound: InboundPlaintextPort, HBONE: HBONEPort, Mark: SocketMark}

// capturedPod is the agent's record of a pod it captured: enough to serve
// it before WDS knows it (a new pod has no IP in the API server at CNI ADD
// time), and the namespace to serve it in after.
type capturedPod struct {
	w     *workloadapi.Workload
	netns string
	// containerID is the sandbox the capture was made for (CNI_CONTAINERID
	// at ADD); empty for a pod rediscovered after a restart.
	containerID string
	// seen: WDS has told of the pod. Its later disappearance from WDS means
	// the Pod was deleted (without a DEL reaching us), and it is dropped.
	seen bool
}

// agentState is the node agent's memory, by podKey.
type agentState struct {
	mu       sync.Mutex
	captured map[string]*capturedPod
	// released are pods whose DEL came while WDS may still send them with
	// HBONE (the annotation's removal not yet seen): not served again until
	// WDS stops doing so, or a new ADD.
	released map[string]bool
	// pods serialises each pod's CNI commands.
	pods podLocks
}

func newAgentState() agentState {
	return agentState{captured: map[string]*capturedPod{}, released: map[string]bool{}}
}

func (p *Proxy) agentEnabled() bool { return p.opts.Kube != nil && p.opts.CNISocket != "" }

func (p *Proxy) capture() capture.Backend {
	if p.opts.Capture != nil {
		return p.opts.Capture
	}
	return capture.NFTables
}

// desired is every workload the proxy should serve now: WDS's HBONE
// workloads on the node, and the pods the agent captured, in the
// namespace it captured them in.
func (p *Proxy) desired() map[string]served {
	out, departed := p.desiredLocked()
	for key, path := range departed {
		// The Pod was deleted without a DEL reaching us (the runtime's DEL
		// failed, or came while the agent was down). If its sandbox is
		// still there, the capture must not outlive the proxy's service.
		if err := p.removeRules(path); err != nil {
			p.log.Warn("capture of a departed pod not removed", "workload", key, "netns", path, "err", err)
		}
	}
	return out
}

// desiredLocked is desired's bookkeeping under the agent's lock; it also
// returns the namespaces of captured pods that have left WDS, by pod.
func (p *Proxy) desiredLocked() (map[string]served, map[string]string) {
	out := map[string]served{}
	departed := map[string]string{}
	hbone := map[string]bool{}
	for _, w := range p.dir.LocalWorkloads(p.opts.Node) {
		out[podKey(w)] = served{w: w}
		hbone[podKey(w)] = true
	}
	a := &p.agent
	a.mu.Lock()
	defer a.mu.Unlock()
	for key := range a.released {
		if !hbone[key] {
			delete(a.released, key)
			continue
		}
		delete(out, key)
	}
	for key, rec := range a.captured {
		known := p.dir.podWorkload(rec.w.GetNamespace(), rec.w.GetName(), p.opts.Node) != nil
		switch {
		case known:
			rec.seen = true
		case rec.seen:
			p.log.Info("captured pod left WDS: no longer served, its capture removed", "workload", key)
			delete(a.captured, key)
			departed[key] = rec.netns
			continue
		}
		s := out[key]
		if s.w == nil {
			// Not HBONE in WDS yet: the record stands in for it.
			s.w = rec.w
		}
		s.netns = rec.netns
		out[key] = s
	}
	return out, departed
}

// podWorkload returns WDS's workload for the Pod namespace/name on node,
// whatever its tunnel protocol; nil if WDS does not list it.
func (d *Directory) podWorkload(namespace, name, node string) *workloadapi.Workload {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, a := range d.byName {
		if w := a.GetWorkload(); w != nil && w.GetNamespace() == namespace && w.GetName() == name && w.GetNode() == node {
			return w
		}
	}
	return nil
}

// HandleCNI is the node agent's answer to the CNI plugin (agentapi.Handler).
// The commands of one pod run one at a time (see podLocks).
func (p *Proxy) HandleCNI(ctx context.Context, req agentapi.Request) error {
	unlock, err := p.agent.pods.lock(ctx, req.PodNamespace+"/"+req.PodName)
	if err != nil {
		return fmt.Errorf("waiting for the pod's earlier CNI command: %w", err)
	}
	defer unlock()
	switch req.Command {
	case agentapi.CommandAdd:
		return p.cniAdd(ctx, req)
	case agentapi.CommandDel:
		return p.cniDel(ctx, req)
	case agentapi.CommandCheck:
		return p.cniCheck(req)
	}
	return fmt.Errorf("unknown command %q", req.Command)
}

// cniAdd captures a new pod in three steps, in this order: the proxy's
// listeners in its namespace, the rules there, then the annotation. A peer
// tunnels to the pod only after the annotation, so it always finds both.
// A failed step undoes the earlier ones: the pod does not start half
// captured.
func (p *Proxy) cniAdd(ctx context.Context, req agentapi.Request) error {
	key := req.PodNamespace + "/" + req.PodName
	pod, err := p.opts.Kube.CoreV1().Pods(req.PodNamespace).Get(ctx, req.PodName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read Pod %s: %w", key, err)
	}
	switch {
	case req.PodUID != "" && req.PodUID != string(pod.UID):
		return fmt.Errorf("pod %s is uid %s in the API server, not %s: a different Pod of the same name", key, pod.UID, req.PodUID)
	case pod.Spec.NodeName != p.opts.Node:
		return fmt.Errorf("pod %s runs on node %q, this agent serves %q", key, pod.Spec.NodeName, p.opts.Node)
	}
	ips := req.PodIPs
	if len(ips) == 0 {
		// The plugin found no IP in the primary plugin's result; the
		// namespace itself says which addresses the pod has.
		if ips, err = namespaceAddrs(req.Netns); err != nil {
			return fmt.Errorf("addresses of pod %s: %w", key, err)
		}
	}
	if err := p.enrol(ctx, pod, ips, req.Netns, req.ContainerID); err != nil {
		return err
	}
	p.log.Info("pod captured", "pod", key, "netns", req.Netns, "ips", ips)
	return nil
}

// enrol captures pod in the namespace at path, for cniAdd and for a running
// pod that joins the mesh. The listeners open before the rules send them
// anything, so a running pod's new connections never find the capture's
// ports closed. A failed step undoes the earlier ones.
func (p *Proxy) enrol(ctx context.Context, pod *corev1.Pod, ips []netip.Addr, path, containerID string) error {
	key := pod.Namespace + "/" + pod.Name
	if err := p.serveCaptured(key, podWorkload(pod, ips, p.opts.TrustDomain), path, containerID); err != nil {
		return err
	}
	if err := p.capture().Install(path, capturePorts); err != nil {
		p.forgetCaptured(key)
		return err
	}
	if err := p.annotate(ctx, pod.Namespace, pod.Name, true); err != nil {
		p.forgetCaptured(key)
		return errors.Join(fmt.Errorf("annotate Pod %s: %w", key, err), p.capture().Remove(path))
	}
	return nil
}

// cniDel undoes cniAdd in reverse order. It succeeds for a pod never seen,
// a namespace already gone and a Pod already deleted: the runtime repeats
// DEL, and sends it after failures.
//
// A DEL names a sandbox, not a Pod: the runtime also sends it for an older
// sandbox of the same Pod after a newer one was added (a kubelet stopping
// or collecting the dead sandbox, often with no namespace left). Such a
// DEL removes the rules from its own namespace only, and leaves the
// current sandbox's record, listeners and annotation alone.
func (p *Proxy) cniDel(ctx context.Context, req agentapi.Request) error {
	key := req.PodNamespace + "/" + req.PodName
	p.agent.mu.Lock()
	rec := p.agent.captured[key]
	if rec != nil && !rec.sameSandbox(req) {
		p.agent.mu.Unlock()
		return p.staleDel(key, rec, req)
	}
	p.agent.mu.Unlock()

	path := req.Netns
	if path == "" && rec != nil {
		path = rec.netns
	}
	p.forgetCaptured(key)
	errs := []error{p.removeRules(path)}
	if err := p.annotate(ctx, req.PodNamespace, req.PodName, false); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("remove the annotation of Pod %s: %w", key, err))
	}
	p.log.Info("pod released", "pod", key, "known", rec != nil)
	return errors.Join(errs...)
}

// sameSandbox reports whether req is about the sandbox rec was captured
// for: the same container ID when both are known, else the same network
// namespace. A DEL without a namespace (the runtime has removed it) is
// another sandbox's when rec's namespace is still there.
func (rec *capturedPod) sameSandbox(req agentapi.Request) bool {
	if rec.containerID != "" && req.ContainerID != "" {
		return rec.containerID == req.ContainerID
	}
	if req.Netns == "" {
		_, err := os.Stat(rec.netns)
		return err != nil
	}
	a, errA := netns.IDOf(rec.netns)
	b, errB := netns.IDOf(req.Netns)
	if errA != nil || errB != nil {
		return rec.netns == req.Netns
	}
	return a == b
}

// staleDel handles a DEL of an earlier sandbox of a pod captured now in
// another: only that sandbox's namespace, if it is still there and is not
// the current one, loses its rules.
func (p *Proxy) staleDel(key string, rec *capturedPod, req agentapi.Request) error {
	p.log.Info("DEL of an earlier sandbox: the pod's current capture is kept", "pod", key,
		"containerID", req.ContainerID, "current", rec.containerID, "netns", req.Netns)
	if req.Netns == "" {
		return nil
	}
	if _, err := os.Stat(req.Netns); err != nil {
		return nil
	}
	if cur, err := netns.IDOf(rec.netns); err == nil {
		if old, err := netns.IDOf(req.Netns); err == nil && old == cur {
			return nil
		}
	}
	return p.capture().Remove(req.Netns)
}

// cniCheck confirms that the pod is captured in the namespace the runtime
// names: the agent's record, the rules there, and the listeners open.
func (p *Proxy) cniCheck(req agentapi.Request) error {
	key := req.PodNamespace + "/" + req.PodName
	p.agent.mu.Lock()
	rec := p.agent.captured[key]
	p.agent.mu.Unlock()
	switch {
	case rec == nil:
		return fmt.Errorf("pod %s is not captured by this node agent", key)
	case rec.netns != req.Netns:
		return fmt.Errorf("pod %s was captured in %s, not %s", key, rec.netns, req.Netns)
	}
	if ok, err := p.capture().Installed(req.Netns); err != nil || !ok {
		return errors.Join(fmt.Errorf("pod %s: the %s capture rules are missing in %s", key, p.capture().Name(), req.Netns), err)
	}
	p.mu.Lock()
	_, listening := p.local[key]
	p.mu.Unlock()
	if !listening {
		return fmt.Errorf("pod %s: the node proxy's listeners are not open in %s", key, req.Netns)
	}
	return nil
}

// serveCaptured records the pod and opens its listeners now, so that ADD
// answers only once they are up.
func (p *Proxy) serveCaptured(key string, w *workloadapi.Workload, path, containerID string) error {
	p.agent.mu.Lock()
	delete(p.agent.released, key)
	p.agent.captured[key] = &capturedPod{w: w, netns: path, containerID: containerID}
	p.agent.mu.Unlock()
	if err := p.reconcile()[key]; err != nil {
		p.forgetCaptured(key)
		return fmt.Errorf("serve pod %s: %w", key, err)
	}
	return nil
}

// removeRules removes the capture from the namespace at path if that is
// still there: a sandbox already gone took its rules with it.
func (p *Proxy) removeRules(path string) error {
	if path == "" {
		return nil
	}
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	return p.capture().Remove(path)
}

func (p *Proxy) forgetCaptured(key string) {
	p.agent.mu.Lock()
	delete(p.agent.captured, key)
	p.agent.released[key] = true
	p.agent.mu.Unlock()
	p.reconcile()
}

// annotate sets or removes the redirection annotation with a merge patch,
// which touches no other field.
func (p *Proxy) annotate(ctx context.Context, namespace, name string, on bool) error {
	value := `"enabled"`
	if !on {
		value = "null"
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, RedirectionAnnotation, value)
	_, err := p.opts.Kube.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// podWorkload is the workload the proxy serves for a pod WDS does not know
// yet: its identity and addresses, which is all its listeners need.
func podWorkload(pod *corev1.Pod, ips []netip.Addr, trustDomain string) *workloadapi.Workload {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	w := &workloadapi.Workload{
		Uid: string(pod.UID), Name: pod.Name, Namespace: pod.Namespace, Node: pod.Spec.NodeName,
		ServiceAccount: sa, TrustDomain: trustDomain,
		TunnelProtocol: workloadapi.TunnelProtocol_HBONE, WorkloadType: workloadapi.WorkloadType_POD,
	}
	for _, ip := range ips {
		w.Addresses = append(w.Addresses, ip.Unmap().AsSlice())
	}
	return w
}
