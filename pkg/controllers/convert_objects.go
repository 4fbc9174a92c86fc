package controllers

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
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
