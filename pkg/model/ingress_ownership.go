package model

// IngressController is the spec.controller of IngressClasses that meshpilot
// serves, Istio's, so existing IngressClasses keep working.
const IngressController = "istio.io/ingress-controller"

// IngressMode is Istio's ingressControllerMode: which Ingresses that name
// no class at all are taken.
type IngressMode string

const (
	// IngressModeOff serves no Ingress.
	IngressModeOff IngressMode = "OFF"
	// IngressModeDefault also takes Ingresses that name no class.
	IngressModeDefault IngressMode = "DEFAULT"
	// IngressModeStrict takes only Ingresses that name our class.
	IngressModeStrict IngressMode = "STRICT"
)

// IngressOwnership decides which Ingresses are meshpilot's.
type IngressOwnership struct {
	// Class is the value of the legacy kubernetes.io/ingress.class
	// annotation that selects us ("istio").
	Class string
	Mode  IngressMode
}

// Owns reports whether ing is served, given the cluster's IngressClasses:
//   - spec.ingressClassName names a class: ours if that class exists and
//     its controller is istio.io/ingress-controller;
//   - else the legacy annotation, if present: ours if it equals Class, so
//     not when it is empty (Istio tests presence too, and the API server
//     gives no default class to an Ingress carrying it);
//   - else the default IngressClass decides, if there is one: of several,
//     the newest (ties broken by name), the one Kubernetes' DefaultIngressClass
//     admission plugin gives such Ingresses;
//   - else only in DEFAULT mode.
//
// In OFF mode nothing is ours.
func (o IngressOwnership) Owns(ing *Ingress, classes []*IngressClass) bool {
	if o.Mode == IngressModeOff {
		return false
	}
	if ing.ClassName != "" {
		for _, c := range classes {
			if c.Name == ing.ClassName {
				return c.Controller == IngressController
			}
		}
		return false
	}
	if ing.ClassAnnotation != nil {
		return *ing.ClassAnnotation == o.Class
	}
	if c := defaultIngressClass(classes); c != nil {
		return c.Controller == IngressController
	}
	return o.Mode == IngressModeDefault
}

// defaultIngressClass is the newest class marked default, the first by
// name among equally new ones; nil when no class is marked.
func defaultIngressClass(classes []*IngressClass) *IngressClass {
	var best *IngressClass
	for _, c := range classes {
		if !c.IsDefault {
			continue
		}
		if best == nil || c.CreationTime.After(best.CreationTime) ||
			(c.CreationTime.Equal(best.CreationTime) && c.Name < best.Name) {
			best = c
		}
	}
	return best
}
