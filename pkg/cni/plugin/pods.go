package plugin

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshpilot/meshpilot/pkg/cni/membership"
)

// PodInfo is what the plugin needs to know of a pod.
type PodInfo struct {
	UID             string
	Labels          map[string]string
	Annotations     map[string]string
	NamespaceLabels map[string]string
}

// Ambient reports whether the pod is to be captured (membership.Ambient).
func (p PodInfo) Ambient() bool {
	return membership.Ambient(p.Labels, p.Annotations, p.NamespaceLabels)
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
