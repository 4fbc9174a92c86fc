package ca

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// ImpersonatedIdentityKey is the key, in IstioCertificateRequest.metadata,
// by which a node proxy asks for another workload's identity (ztunnel and
// istiod spell it so).
const ImpersonatedIdentityKey = "ImpersonatedIdentity"

// ErrPermissionDenied: the caller is proven but may not have what it asked.
var ErrPermissionDenied = errors.New("permission denied")

// NodeAuthorizer decides whether a node proxy may impersonate a workload: a
// small version of Kubernetes' Node authorizer. The caller's ServiceAccount
// must be a trusted node account, and the requested identity must be the
// ServiceAccount of a Pod on the caller's own node, so that a compromised
// node proxy can obtain only the identities of its own node's workloads.
type NodeAuthorizer struct {
	kube    kubernetes.Interface
	trusted map[types.NamespacedName]bool
}

// ParseNodeAccounts parses "ns/sa" entries (istiod's CA_TRUSTED_NODE_ACCOUNTS
// is a comma-separated list of them).
func ParseNodeAccounts(entries []string) ([]types.NamespacedName, error) {
	var out []types.NamespacedName
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		ns, sa, ok := strings.Cut(e, "/")
		if !ok || ns == "" || sa == "" || strings.Contains(sa, "/") {
			return nil, fmt.Errorf("trusted node account %q is not of the form <namespace>/<serviceaccount>", e)
		}
		out = append(out, types.NamespacedName{Namespace: ns, Name: sa})
	}
	return out, nil
}

// NewNodeAuthorizer needs a client that may get and list Pods.
func NewNodeAuthorizer(kube kubernetes.Interface, trusted []types.NamespacedName) *NodeAuthorizer {
	m := make(map[types.NamespacedName]bool, len(trusted))
	for _, t := range trusted {
		m[t] = true
	}
	return &NodeAuthorizer{kube: kube, trusted: m}
}

// Authorize returns nil when caller may have target's identity; otherwise
// an error wrapping ErrPermissionDenied, or ErrUnavailable when the API
// server gave no answer (unreachable, overloaded, timed out), the one case
// where the caller should retry, or ErrCAForbidden when it refused the CA
// itself the Pod lookups.
//
// The caller's node comes from its own Pod, as istiod finds it: the token
// must be bound to a Pod (TokenReview pod-name and pod-uid extras), that
// Pod must still exist with the same UID and run as the caller's
// ServiceAccount, and its spec.nodeName is the node. When the token also
// names the node (node-name extra, Kubernetes ≥ 1.30), both must agree.
func (n *NodeAuthorizer) Authorize(ctx context.Context, caller *Caller, target Identity) error {
	if !n.trusted[caller.SA()] {
		return fmt.Errorf("%w: %s is not a trusted node account and may not impersonate", ErrPermissionDenied, caller.Identity)
	}
	if target.TrustDomain != caller.Identity.TrustDomain {
		return fmt.Errorf("%w: %s is not in trust domain %q", ErrPermissionDenied, target, caller.Identity.TrustDomain)
	}
	if caller.PodName == "" || caller.PodUID == "" {
		return fmt.Errorf("%w: impersonation needs a Pod-bound ServiceAccount token, so that the caller's node is known", ErrPermissionDenied)
	}
	pod, err := n.kube.CoreV1().Pods(caller.Identity.Namespace).Get(ctx, caller.PodName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		// The API server did answer: the Pod is gone (deleted since the
		// TokenReview accepted its token). That is final, not a passing
		// failure: without its Pod the caller has no node, so it cannot
		// show that the identity it asks for runs beside it.
		return fmt.Errorf("%w: the caller's Pod %s/%s no longer exists", ErrPermissionDenied, caller.Identity.Namespace, caller.PodName)
	case err != nil:
		return apiCheckFailed("get pods", fmt.Sprintf("get the caller's Pod %s/%s", caller.Identity.Namespace, caller.PodName), err)
	}
	switch {
	case string(pod.UID) != caller.PodUID:
		// A Pod re-created under the same name: its predecessor's token
		// must not speak for it.
		return fmt.Errorf("%w: the caller's Pod %s/%s is not the one its token was issued for", ErrPermissionDenied, pod.Namespace, pod.Name)
	case pod.Spec.ServiceAccountName != caller.Identity.ServiceAccount:
		return fmt.Errorf("%w: the caller's Pod %s/%s runs as %q, not %q", ErrPermissionDenied, pod.Namespace, pod.Name,
			pod.Spec.ServiceAccountName, caller.Identity.ServiceAccount)
	case pod.Spec.NodeName == "":
		return fmt.Errorf("%w: the caller's Pod %s/%s is not scheduled to a node", ErrPermissionDenied, pod.Namespace, pod.Name)
	case caller.NodeName != "" && caller.NodeName != pod.Spec.NodeName:
		return fmt.Errorf("%w: the caller's token names node %q but its Pod runs on %q", ErrPermissionDenied, caller.NodeName, pod.Spec.NodeName)
	}
	node := pod.Spec.NodeName

	pods, err := n.kube.CoreV1().Pods(target.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return apiCheckFailed("list pods", fmt.Sprintf("list Pods of %s on node %q", target.Namespace, node), err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		// A Pod that has finished will not present a certificate again.
		if p.Spec.ServiceAccountName == target.ServiceAccount &&
			p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return nil
		}
	}
	return fmt.Errorf("%w: no Pod running as %s/%s is on the caller's node %q", ErrPermissionDenied, target.Namespace, target.ServiceAccount, node)
}
