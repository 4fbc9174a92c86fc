package controllers

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// annotationLastApplied is kubectl's copy of the whole object; often the
// largest thing in it, and never read here.
const annotationLastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// trimObject is the informers' transform: it drops what meshpilot never
// reads before the object enters the cache, so memory stays small at
// scale. It must stay idempotent (client-go may apply it twice).
func trimObject(obj any) (any, error) {
	if pod, ok := obj.(*corev1.Pod); ok {
		return trimPod(pod), nil
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
// ConvertPod reads; containers, volumes and conditions are dropped.
func trimPod(pod *corev1.Pod) *corev1.Pod {
	trimMeta(&pod.ObjectMeta)
	return &corev1.Pod{
		TypeMeta:   pod.TypeMeta,
		ObjectMeta: pod.ObjectMeta,
		Spec: corev1.PodSpec{
			ServiceAccountName: pod.Spec.ServiceAccountName,
			NodeName:           pod.Spec.NodeName,
		},
		Status: corev1.PodStatus{
			Phase:  pod.Status.Phase,
			PodIP:  pod.Status.PodIP,
			PodIPs: pod.Status.PodIPs,
		},
	}
}
