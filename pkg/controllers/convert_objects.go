package controllers

import (
	"errors"
	"slices"
	"strings"

	apinetworking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/validation"
)

// ConvertPod turns a Pod into a workload. Its label map is the Pod's own.
func ConvertPod(pod *corev1.Pod) *model.Workload {
	w := &model.Workload{
		Name:           pod.Name,
		Namespace:      pod.Namespace,
		Labels:         pod.Labels,
		ServiceAccount: pod.Spec.ServiceAccountName,
		NodeName:       pod.Spec.NodeName,
		Locality:       podLocality(pod.Labels),
	}
	switch {
	case len(pod.Status.PodIPs) > 0:
		w.IPs = make([]string, 0, len(pod.Status.PodIPs))
		for _, ip := range pod.Status.PodIPs {
			if ip.IP != "" {
				w.IPs = append(w.IPs, ip.IP)
			}
		}
	case pod.Status.PodIP != "":
		w.IPs = []string{pod.Status.PodIP}
	}
	return w
}

// podFinished reports whether a Pod will never serve again; such a Pod
// counts as deleted.
func podFinished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

func podLocality(labels map[string]string) model.Locality {
	if pinned, ok := labels[labelIstioLocality]; ok {
		var loc model.Locality
		parts := strings.SplitN(pinned, ".", 3)
		for i, dst := range []*string{&loc.Region, &loc.Zone, &loc.SubZone} {
			if i < len(parts) {
				*dst = parts[i]
			}
		}
		return loc
	}
	return model.Locality{
		Region:  labels[labelRegion],
		Zone:    labels[labelZone],
		SubZone: labels[labelSubzone],
	}
}

func sameWorkload(a, b *model.Workload) bool {
	return a.Name == b.Name && a.Namespace == b.Namespace &&
		a.ServiceAccount == b.ServiceAccount && a.NodeName == b.NodeName &&
		a.Locality == b.Locality && slices.Equal(a.IPs, b.IPs) && mapsEqual(a.Labels, b.Labels)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// ConvertNamespace turns a Namespace into the model's view of it.
func ConvertNamespace(ns *corev1.Namespace) *model.Namespace {
	return &model.Namespace{Name: ns.Name, Labels: ns.Labels}
}

// destinationRuleParts unpacks any served version of a DestinationRule:
// v1, v1beta1 and v1alpha3 carry the same proto spec type.
func destinationRuleParts(obj any) (*metav1.ObjectMeta, *apinetworking.DestinationRule, bool) {
	switch dr := obj.(type) {
	case *networkingv1.DestinationRule:
		return &dr.ObjectMeta, &dr.Spec, true
	case *networkingv1beta1.DestinationRule:
		return &dr.ObjectMeta, &dr.Spec, true
	case *networkingv1alpha3.DestinationRule:
		return &dr.ObjectMeta, &dr.Spec, true
	}
	return nil, nil, false
}

// ConvertDestinationRule validates a DestinationRule and wraps it as a
// model.Config. The spec is shared with the object, not copied.
func ConvertDestinationRule(meta *metav1.ObjectMeta, spec *apinetworking.DestinationRule) (*model.Config, error) {
	if err := validation.ValidateDestinationRule(meta.Name, meta.Namespace, spec); err != nil {
		return nil, err
	}
	if spec == nil {
		return nil, errors.New("no spec")
	}
	return &model.Config{
		Kind:         model.KindDestinationRule,
		Name:         meta.Name,
		Namespace:    meta.Namespace,
		Labels:       meta.Labels,
		Annotations:  meta.Annotations,
		Revision:     meta.ResourceVersion,
		Generation:   meta.Generation,
		CreationTime: meta.CreationTimestamp.Time,
		Spec:         spec,
	}, nil
}
