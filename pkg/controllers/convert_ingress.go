package controllers

import (
	"reflect"

	k8snetworkingv1 "k8s.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// Annotations that decide which controller serves an Ingress.
const (
	// annotationIngressClass is the legacy class annotation, from before
	// spec.ingressClassName.
	annotationIngressClass = "kubernetes.io/ingress.class"
	// annotationDefaultIngressClass marks the IngressClass that Ingresses
	// without any class belong to.
	annotationDefaultIngressClass = "ingressclass.kubernetes.io/is-default-class"
)

// ConvertIngress turns a networking.k8s.io/v1 Ingress into the model's view
// of it. Nothing is judged here: invalid paths, missing backends and
// resource backends are kept as written so that the translation can report
// them against the Ingress. Slices of host names are shared with the object.
func ConvertIngress(ing *k8snetworkingv1.Ingress) *model.Ingress {
	out := &model.Ingress{
		Name:         ing.Name,
		Namespace:    ing.Namespace,
		CreationTime: ing.CreationTimestamp.Time,
		Revision:     ing.ResourceVersion,
		Generation:   ing.Generation,
	}
	if ing.Spec.IngressClassName != nil {
		out.ClassName = *ing.Spec.IngressClassName
	}
	if class, ok := ing.Annotations[annotationIngressClass]; ok {
		out.ClassAnnotation = &class
	}
	if ing.Spec.DefaultBackend != nil {
		b := convertIngressBackend(ing.Spec.DefaultBackend)
		out.DefaultBackend = &b
	}
	if len(ing.Spec.Rules) > 0 {
		out.Rules = make([]model.IngressRule, len(ing.Spec.Rules))
		for i := range ing.Spec.Rules {
			out.Rules[i] = convertIngressRule(&ing.Spec.Rules[i])
		}
	}
	if len(ing.Spec.TLS) > 0 {
		out.TLS = make([]model.IngressTLS, len(ing.Spec.TLS))
		for i, tls := range ing.Spec.TLS {
			out.TLS[i] = model.IngressTLS{Hosts: tls.Hosts, SecretName: tls.SecretName}
		}
	}
	if lbs := ing.Status.LoadBalancer.Ingress; len(lbs) > 0 {
		out.LoadBalancer = make([]model.LoadBalancerIngress, len(lbs))
		for i, lb := range lbs {
			out.LoadBalancer[i] = model.LoadBalancerIngress{IP: lb.IP, Hostname: lb.Hostname}
		}
	}
	return out
}

// convertIngressRule keeps a rule without paths (only a host) as a rule
// with none: it still names a host that TLS entries without hosts cover.
func convertIngressRule(rule *k8snetworkingv1.IngressRule) model.IngressRule {
	out := model.IngressRule{Host: rule.Host}
	if rule.HTTP == nil || len(rule.HTTP.Paths) == 0 {
		return out
	}
	out.Paths = make([]model.IngressPath, len(rule.HTTP.Paths))
	for i := range rule.HTTP.Paths {
		p := &rule.HTTP.Paths[i]
		// The API server requires pathType; a file may omit it, and then
		// the path means what the controller decides, as for
		// ImplementationSpecific.
		pathType := model.PathTypeImplementationSpecific
		if p.PathType != nil {
			pathType = model.PathType(*p.PathType)
		}
		out.Paths[i] = model.IngressPath{Path: p.Path, PathType: pathType, Backend: convertIngressBackend(&p.Backend)}
	}
	return out
}

func convertIngressBackend(b *k8snetworkingv1.IngressBackend) model.IngressBackend {
	var out model.IngressBackend
	if svc := b.Service; svc != nil {
		out.ServiceName = svc.Name
		if svc.Port.Number > 0 {
			out.PortNumber = uint32(svc.Port.Number)
		}
		out.PortName = svc.Port.Name
	}
	if res := b.Resource; res != nil {
		out.Resource = res.Kind
		if res.APIGroup != nil && *res.APIGroup != "" {
			out.Resource = *res.APIGroup + "/" + res.Kind
		}
		if out.Resource == "" {
			out.Resource = "resource"
		}
	}
	return out
}

// sameIngress reports whether two conversions serve the same, whatever
// their revisions and statuses: a metadata-only change (labels, unrelated
// annotations) then costs no store write, and neither it nor a status-only
// change (which the ingester stores apart) costs a re-translation or a push.
func sameIngress(a, b *model.Ingress) bool {
	if !a.CreationTime.Equal(b.CreationTime) {
		return false
	}
	ac, bc := *a, *b
	ac.Revision, bc.Revision = "", ""
	ac.LoadBalancer, bc.LoadBalancer = nil, nil
	ac.CreationTime, bc.CreationTime = b.CreationTime, b.CreationTime
	return reflect.DeepEqual(ac, bc)
}

// ConvertIngressClass turns a networking.k8s.io/v1 IngressClass into the
// model's view of it.
func ConvertIngressClass(class *k8snetworkingv1.IngressClass) *model.IngressClass {
	return &model.IngressClass{
		Name:       class.Name,
		Controller: class.Spec.Controller,
		// Kubernetes' own admission plugin accepts exactly "true".
		IsDefault:    class.Annotations[annotationDefaultIngressClass] == "true",
		CreationTime: class.CreationTimestamp.Time,
	}
}
