package controllers

import (
	"regexp"
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
		WorkloadName:   podWorkloadName(pod),
		// A terminating Pod still has its IP but is going away: node proxies
		// should stop picking it, as kube-proxy does.
		Ready:       podReady(pod) && pod.DeletionTimestamp == nil,
		HostNetwork: pod.Spec.HostNetwork,
		Redirected:  pod.Annotations[model.AmbientRedirectionAnnotation] == model.AmbientRedirectionEnabled,
		NamedPorts:  podNamedPorts(pod),
	}
	w.CanonicalName, w.CanonicalRevision = model.CanonicalService(pod.Labels, w.WorkloadName)
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

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// cronJobName matches the Jobs a CronJob creates, <cronjob>-<schedule
// time in minutes>, the way Istio recognises them.
var cronJobName = regexp.MustCompile(`^(.+)-\d{8,10}$`)

// podWorkloadName names what runs the Pod, as Istio does: a generated Pod
// is named after its controller, where a ReplicaSet's pod-template-hash
// suffix is taken off to name the Deployment, and a Job's schedule suffix
// to name the CronJob. Anything else is named after the Pod itself.
func podWorkloadName(pod *corev1.Pod) string {
	if pod.GenerateName == "" {
		return pod.Name
	}
	for _, ref := range pod.OwnerReferences {
		if ref.Controller == nil || !*ref.Controller {
			continue
		}
		switch {
		case ref.Kind == "ReplicaSet" && pod.Labels["pod-template-hash"] != "" &&
			strings.HasSuffix(ref.Name, pod.Labels["pod-template-hash"]):
			return strings.TrimSuffix(ref.Name, "-"+pod.Labels["pod-template-hash"])
		case ref.Kind == "Job":
			if m := cronJobName.FindStringSubmatch(ref.Name); m != nil {
				return m[1]
			}
		}
		if ref.Name != "" {
			return ref.Name
		}
		break
	}
	return pod.Name
}

// podNamedPorts lists the named TCP ports of the Pod's containers and of
// its sidecar (always restarting) init containers, sorted by name; the
// first container to name a port wins, as Kubernetes resolves targetPort.
func podNamedPorts(pod *corev1.Pod) []model.NamedPort {
	var out []model.NamedPort
	add := func(ports []corev1.ContainerPort) {
		for _, p := range ports {
			if p.Name == "" || (p.Protocol != "" && p.Protocol != corev1.ProtocolTCP) || p.ContainerPort <= 0 {
				continue
			}
			if slices.ContainsFunc(out, func(n model.NamedPort) bool { return n.Name == p.Name }) {
				continue
			}
			out = append(out, model.NamedPort{Name: p.Name, Port: uint32(p.ContainerPort)})
		}
	}
	for i := range pod.Spec.Containers {
		add(pod.Spec.Containers[i].Ports)
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(c.Ports)
		}
	}
	slices.SortFunc(out, func(a, b model.NamedPort) int { return strings.Compare(a.Name, b.Name) })
	return out
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

// ConvertNamespace turns a Namespace into the model's view of it.
func ConvertNamespace(ns *corev1.Namespace) *model.Namespace {
	return &model.Namespace{Name: ns.Name, Labels: ns.Labels}
}
