package plugin

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Ambient mode labels, Istio's names. They repeat pkg/model's on purpose:
// the plugin is data plane and imports no control-plane package, and the
// names are Istio's API, which does not change under us.
const (
	dataplaneModeLabel   = "istio.io/dataplane-mode"
	dataplaneModeAmbient = "ambient"
	dataplaneModeNone    = "none"
	// sidecarStatusAnnotation is what sidecar injection writes on a Pod.
	sidecarStatusAnnotation = "sidecar.istio.io/status"
)

// PodInfo is what the plugin needs to know of a pod.
type PodInfo struct {
	UID             string
	Labels          map[string]string
	Annotations     map[string]string
	NamespaceLabels map[string]string
}

// Ambient reports whether the pod is to be captured for ambient mode, by
// the control plane's rule (its own label says ambient, or its namespace's
// does and its own does not say none), and, as istio-cni decides, only
// when it has no injected sidecar: a sidecar's own redirection and ours in
// one namespace would send its traffic through both proxies, or in a loop.
func (p PodInfo) Ambient() bool {
	if _, ok := p.Annotations[sidecarStatusAnnotation]; ok {
		return false
	}
	switch p.Labels[dataplaneModeLabel] {
	case dataplaneModeAmbient:
		return true
	case dataplaneModeNone:
		return false
	}
	return p.NamespaceLabels[dataplaneModeLabel] == dataplaneModeAmbient
}

// Pods reads a pod's metadata. KubePods reads it from the API server.
type Pods interface {
	Get(ctx context.Context, namespace, name string) (PodInfo, error)
}

// KubePods reads Pods and Namespaces through client-go.
type KubePods struct{ Client kubernetes.Interface }

// NewKubePods builds a client from a kubeconfig file, with a short timeout:
// the runtime is waiting on us to start a pod.
func NewKubePods(kubeconfig string) (*KubePods, error) {
	if kubeconfig == "" {
		return nil, fmt.Errorf("no kubeconfig in the plugin config: the installer writes one (pilot cni install --write-kubeconfig)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.Timeout = 5 * time.Second
	cfg.UserAgent = "meshpilot-cni"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &KubePods{Client: c}, nil
}

// Get reads the Pod and its Namespace.
func (k *KubePods) Get(ctx context.Context, namespace, name string) (PodInfo, error) {
	pod, err := k.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return PodInfo{}, err
	}
	ns, err := k.Client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		return PodInfo{}, err
	}
	return PodInfo{UID: string(pod.UID), Labels: pod.Labels, Annotations: pod.Annotations, NamespaceLabels: ns.Labels}, nil
}
