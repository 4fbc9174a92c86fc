package controllers

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// annotationLastApplied is kubectl's copy of the whole object; often the
// largest thing in it, and never read here.
const annotationLastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// trimObject is the informers' transform: it drops what meshpilot never
// reads before the object enters the cache, so memory stays small at
// scale. It must stay idempotent (client-go may apply it twice).
func trimObject(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return trimPod(o), nil
	case *corev1.Secret:
		return trimSecret(o), nil
	case *discoveryv1.EndpointSlice:
		return trimEndpointSlice(o), nil
	}
	if accessor, ok := obj.(metav1.ObjectMetaAccessor); ok {
		trimMeta(accessor.GetObjectMeta())
	}
	return obj, nil
}

func trimMeta(meta metav1.Object) {
	meta.SetManagedFields(nil)
	if annotations := meta.GetAnnotations(); annotations != nil {
		if _, ok := annotations[annotationLastApplied]; ok {
			delete(annotations, annotationLastApplied)
			if len(annotations) == 0 {
				meta.SetAnnotations(nil)
			}
		}
	}
}

// trimPod keeps the metadata and the few spec and status fields that
// ConvertPod reads: of the containers only their ports, of the conditions
// only Ready; volumes, images and the rest are dropped.
func trimPod(pod *corev1.Pod) *corev1.Pod {
	trimMeta(&pod.ObjectMeta)
	out := &corev1.Pod{
		TypeMeta:   pod.TypeMeta,
		ObjectMeta: pod.ObjectMeta,
		Spec: corev1.PodSpec{
			ServiceAccountName: pod.Spec.ServiceAccountName,
			NodeName:           pod.Spec.NodeName,
			HostNetwork:        pod.Spec.HostNetwork,
			Containers:         trimContainers(pod.Spec.Containers, false),
			InitContainers:     trimContainers(pod.Spec.InitContainers, true),
		},
		Status: corev1.PodStatus{
			Phase:  pod.Status.Phase,
			PodIP:  pod.Status.PodIP,
			PodIPs: pod.Status.PodIPs,
		},
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			out.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
			break
		}
	}
	return out
}

// trimContainers keeps the named ports of containers; of init containers,
// only those of sidecars (restartPolicy Always), the only ones that serve.
func trimContainers(cs []corev1.Container, init bool) []corev1.Container {
	var out []corev1.Container
	for i := range cs {
		c := &cs[i]
		if init && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
			continue
		}
		var ports []corev1.ContainerPort
		for _, p := range c.Ports {
			if p.Name != "" {
				ports = append(ports, corev1.ContainerPort{Name: p.Name, ContainerPort: p.ContainerPort, Protocol: p.Protocol})
			}
		}
		if len(ports) == 0 {
			continue
		}
		out = append(out, corev1.Container{Name: c.Name, Ports: ports, RestartPolicy: c.RestartPolicy})
	}
	return out
}

// trimSecret keeps a Secret's identity, type and the data keys that
// ConvertSecret reads. Labels and annotations go too: nothing reads them,
// and a Secret's annotations can hold a copy of its data. The data map is
// rebuilt, not filtered in place, because the informer may share it.
func trimSecret(sec *corev1.Secret) *corev1.Secret {
	out := &corev1.Secret{
		TypeMeta: sec.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:              sec.Name,
			Namespace:         sec.Namespace,
			UID:               sec.UID,
			ResourceVersion:   sec.ResourceVersion,
			Generation:        sec.Generation,
			CreationTimestamp: sec.CreationTimestamp,
			DeletionTimestamp: sec.DeletionTimestamp,
		},
		Type: sec.Type,
	}
	for _, k := range tlsSecretKeys {
		if v, ok := sec.Data[k]; ok {
			if out.Data == nil {
				out.Data = make(map[string][]byte, len(tlsSecretKeys))
			}
			out.Data[k] = v
		}
	}
	return out
}

// trimEndpointSlice keeps what ConvertEndpointSlice and the ingester read
// of a slice: of each endpoint its addresses, conditions, zone and the
// kind, namespace and name of its target. EndpointSlices are the most
// numerous objects the control plane holds (one endpoint per Pod behind a
// Service), so the endpoints are also copied into an array of their exact
// length: decoding grows it by doubling, and left a 10-endpoint slice
// holding room for 16. Conditions point at shared values, and a target in
// the slice's own namespace shares the slice's namespace string.
func trimEndpointSlice(slice *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	trimMeta(&slice.ObjectMeta)
	var packed []discoveryv1.Endpoint
	if len(slice.Endpoints) > 0 {
		packed = make([]discoveryv1.Endpoint, len(slice.Endpoints))
	}
	for i := range slice.Endpoints {
		ep := &slice.Endpoints[i]
		packed[i] = discoveryv1.Endpoint{
			Addresses: ep.Addresses,
			Conditions: discoveryv1.EndpointConditions{
				Ready:       sharedBool(ep.Conditions.Ready),
				Serving:     sharedBool(ep.Conditions.Serving),
				Terminating: sharedBool(ep.Conditions.Terminating),
			},
			Zone:      ep.Zone,
			TargetRef: trimTargetRef(ep.TargetRef, slice.Namespace),
		}
	}
	slice.Endpoints = packed
	return slice
}

// The values shared conditions point at. Objects in an informer's cache
// are never written to, so one pointer serves every slice.
var (
	sharedTrue  = true
	sharedFalse = false
)

func sharedBool(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &sharedTrue
	default:
		return &sharedFalse
	}
}

func trimTargetRef(ref *corev1.ObjectReference, sliceNamespace string) *corev1.ObjectReference {
	if ref == nil {
		return nil
	}
	out := &corev1.ObjectReference{Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name}
	if out.Kind == "Pod" {
		out.Kind = "Pod" // the constant's bytes, not a copy decoded per endpoint
	}
	if out.Namespace == sliceNamespace {
		out.Namespace = sliceNamespace
	}
	return out
}
