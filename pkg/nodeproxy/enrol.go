package nodeproxy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/meshpilot/meshpilot/pkg/cni/membership"
)

// enrolRetries bounds how often a running pod whose network namespace was
// not found, or not certainly its own, is tried again; its sandbox may be
// being replaced, and the new sandbox's ADD captures it then.
const enrolRetries = 5

// membershipWatch keeps the capture of this node's running pods in step
// with ambient mode's labels, as istio-cni's node agent does: a pod that
// joins the mesh while it runs (its namespace or its own label changed) is
// captured in its current sandbox, without a restart, and one that leaves
// is released. The CNI ADD captures the pods that are ambient when they
// start; this catches every change after that.
type membershipWatch struct {
	p          *Proxy
	pods       corelisters.PodLister
	namespaces corelisters.NamespaceLister
	queue      workqueue.TypedRateLimitingInterface[string]
	// scan is used by the one worker only.
	scan *addressScan
}

// watchMembership runs the watch until ctx ends. It is started after the
// agent's socket listens and its rediscovery, so that what an earlier
// agent captured is known before the first decision.
func (p *Proxy) watchMembership(ctx context.Context) error {
	podFactory := informers.NewSharedInformerFactoryWithOptions(p.opts.Kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", p.opts.Node).String()
		}))
	nsFactory := informers.NewSharedInformerFactory(p.opts.Kube, 0)
	podInformer := podFactory.Core().V1().Pods()
	nsInformer := nsFactory.Core().V1().Namespaces()
	for _, inf := range []cache.SharedIndexInformer{podInformer.Informer(), nsInformer.Informer()} {
		// Only labels, annotations, addresses and the spec's node and
		// network matter here; managedFields is often most of an object.
		if err := inf.SetTransform(dropManagedFields); err != nil {
			return err
		}
	}
	w := &membershipWatch{
		p: p, pods: podInformer.Lister(), namespaces: nsInformer.Lister(), scan: newAddressScan(p),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](500*time.Millisecond, time.Minute),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodeproxy-membership"}),
	}
	defer w.queue.ShutDown()

	onPod := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			w.queue.Add(key)
		}
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onPod,
		UpdateFunc: func(old, cur any) {
			if podJoinChanged(old.(*corev1.Pod), cur.(*corev1.Pod)) {
				onPod(cur)
			}
		},
	}); err != nil {
		return err
	}
	if _, err := nsInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { w.enqueueNamespace(obj.(*corev1.Namespace).Name) },
		UpdateFunc: func(old, cur any) {
			before, after := old.(*corev1.Namespace), cur.(*corev1.Namespace)
			if before.Labels[membership.DataplaneModeLabel] != after.Labels[membership.DataplaneModeLabel] {
				w.enqueueNamespace(after.Name)
			}
		},
	}); err != nil {
		return err
	}
	podFactory.Start(ctx.Done())
	nsFactory.Start(ctx.Done())
	defer podFactory.Shutdown()
	defer nsFactory.Shutdown()
	for typ, ok := range podFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("node agent: %v informer never synced", typ)
		}
	}
	for typ, ok := range nsFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("node agent: %v informer never synced", typ)
		}
	}
	go func() {
		<-ctx.Done()
		w.queue.ShutDown()
	}()
	for w.next(ctx) {
	}
	return nil
}

func dropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// podJoinChanged reports whether an update may move a pod into the mesh or
// out of it: the inputs of membership.Ambient, or its addresses (a new
// sandbox, whose ADD decided on labels that its namespace's may have
// changed since, while the watch found no record to act on). Other
// updates are not looked at, so that a pod whose sandbox's DEL released it,
// the Pod not yet gone, is not captured again by the annotation's removal.
func podJoinChanged(old, cur *corev1.Pod) bool {
	_, oldSidecar := old.Annotations[membership.SidecarStatusAnnotation]
	_, curSidecar := cur.Annotations[membership.SidecarStatusAnnotation]
	return old.Labels[membership.DataplaneModeLabel] != cur.Labels[membership.DataplaneModeLabel] ||
		oldSidecar != curSidecar || !slices.Equal(old.Status.PodIPs, cur.Status.PodIPs)
}

func (w *membershipWatch) enqueueNamespace(namespace string) {
	pods, err := w.pods.Pods(namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, pod := range pods {
		w.queue.Add(pod.Namespace + "/" + pod.Name)
	}
}

// next handles one queued pod; false once the queue is shut down.
func (w *membershipWatch) next(ctx context.Context) bool {
	key, shutdown := w.queue.Get()
	if shutdown {
		return false
	}
	defer w.queue.Done(key)
	err := w.sync(ctx, key)
	switch {
	case err == nil:
		w.queue.Forget(key)
	case errors.Is(err, errNetnsNotFound) && w.queue.NumRequeues(key) >= enrolRetries:
		w.p.log.Warn("node agent: running pod not captured: no network namespace is certainly its own", "pod", key, "err", err)
		w.queue.Forget(key)
	default:
		w.p.log.Info("node agent: membership change not applied yet, retrying", "pod", key, "err", err)
		w.queue.AddRateLimited(key)
	}
	return true
}

// sync captures or releases one pod, as its labels and its namespace's now
// say. Pods that are not running (no sandbox yet, or one being torn down)
// are left to their CNI ADD and DEL.
func (w *membershipWatch) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	unlock, err := w.p.agent.pods.lock(ctx, key)
	if err != nil {
		return err
	}
	defer unlock()
	pod, err := w.pods.Pods(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	ns, err := w.namespaces.Get(namespace)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	w.p.agent.mu.Lock()
	rec := w.p.agent.captured[key]
	w.p.agent.mu.Unlock()
	want := w.p.inMesh(pod, ns)
	switch {
	case want && rec == nil && running(pod):
		err := w.enrolRunning(ctx, pod)
		w.p.m.membershipChange("joined", err)
		return err
	case !want && rec != nil:
		err := w.p.unenrol(ctx, key, rec)
		w.p.m.membershipChange("left", err)
		return err
	case !want && pod.Annotations[RedirectionAnnotation] == "enabled":
		// An earlier agent's annotation with no capture behind it (this
		// agent's restart found none to serve): WDS must stop sending the
		// pod with HBONE, or peers tunnel to listeners that are not there.
		err := w.p.annotate(ctx, namespace, name, false)
		if apierrors.IsNotFound(err) {
			err = nil
		}
		w.p.m.membershipChange("left", err)
		return err
	}
	return nil
}

// inMesh is the plugin's decision for pod, made again on its labels now.
// Host-network pods share the node's namespace, which is never captured.
func (p *Proxy) inMesh(pod *corev1.Pod, ns *corev1.Namespace) bool {
	return !pod.Spec.HostNetwork && !slices.Contains(p.opts.ExcludeNamespaces, pod.Namespace) &&
		membership.Ambient(pod.Labels, pod.Annotations, ns.Labels)
}

// running reports whether the pod has a sandbox to capture in and is not
// on its way out: its addresses are known, and it is neither finished nor
// being deleted.
func running(pod *corev1.Pod) bool {
	return len(pod.Status.PodIPs) > 0 && pod.DeletionTimestamp == nil &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

var errNetnsNotFound = errors.New("no single network namespace holds the pod's addresses")

// enrolRunning captures a pod that is already running: the namespace that
// holds its addresses is found as on a restart, and must not be another
// pod's by its processes' cgroups; then it is captured as an ADD captures.
func (w *membershipWatch) enrolRunning(ctx context.Context, pod *corev1.Pod) error {
	var ips []netip.Addr
	for _, s := range pod.Status.PodIPs {
		if ip, err := netip.ParseAddr(s.IP); err == nil {
			ips = append(ips, ip.Unmap())
		}
	}
	ns, err := w.scan.namespaceOf(ips)
	if err == nil {
		err = checkOwner(ns, string(pod.UID))
	}
	if err == nil {
		err = w.p.enrol(ctx, pod, ips, ns.path, "")
	}
	if err != nil {
		// What the scan said may be out of date; the retry scans again.
		w.scan.invalidate()
		return err
	}
	w.p.log.Info("running pod joined the mesh: captured", "pod", pod.Namespace+"/"+pod.Name, "netns", ns.path, "ips", ips)
	return nil
}

// namespaceHolding is the one namespace that holds every address of ips.
func namespaceHolding(byIP map[netip.Addr][]string, ips []netip.Addr) (string, error) {
	if len(ips) == 0 {
		return "", fmt.Errorf("%w: the pod has none", errNetnsNotFound)
	}
	candidates := slices.Clone(byIP[ips[0]])
	for _, ip := range ips[1:] {
		candidates = slices.DeleteFunc(candidates, func(c string) bool { return !slices.Contains(byIP[ip], c) })
	}
	if len(candidates) != 1 {
		return "", fmt.Errorf("%w (%v): %d do", errNetnsNotFound, ips, len(candidates))
	}
	return candidates[0], nil
}

// unenrol releases a running pod that left the mesh. The annotation goes
// first, so that WDS stops sending the pod with HBONE while its listeners
// still serve the peers that tunnel to it meanwhile; then the rules, so
// that the pod's own traffic is never sent to listeners already closed;
// then the listeners. The record is forgotten only once the rules are
// gone: a failed removal is retried, and a retry that found no record
// would leave the pod's traffic sent to a proxy that no longer serves it.
func (p *Proxy) unenrol(ctx context.Context, key string, rec *capturedPod) error {
	namespace, name, _ := cache.SplitMetaNamespaceKey(key)
	if err := p.annotate(ctx, namespace, name, false); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove the annotation of Pod %s: %w", key, err)
	}
	if err := p.removeRules(rec.netns); err != nil {
		return fmt.Errorf("remove the capture of Pod %s: %w", key, err)
	}
	p.forgetCaptured(key)
	p.log.Info("running pod left the mesh: released", "pod", key, "netns", rec.netns)
	return nil
}
