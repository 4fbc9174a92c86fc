package model

import (
	"testing"
	"time"
)

func TestIngressOwnership(t *testing.T) {
	ours := &IngressClass{Name: "istio", Controller: IngressController}
	theirs := &IngressClass{Name: "nginx", Controller: "k8s.io/ingress-nginx"}
	defaultOurs := &IngressClass{Name: "mesh", Controller: IngressController, IsDefault: true}
	defaultTheirs := &IngressClass{Name: "other", Controller: "example.com/other", IsDefault: true}
	// Several default classes: the API server gives an Ingress without a
	// class the newest, the first by name among equally new ones.
	older, newer := time.Unix(1_700_000_000, 0), time.Unix(1_700_000_100, 0)
	newerTheirs := &IngressClass{Name: "a-nginx", Controller: "k8s.io/ingress-nginx", IsDefault: true, CreationTime: newer}
	olderOurs := &IngressClass{Name: "istio", Controller: IngressController, IsDefault: true, CreationTime: older}
	newerOurs := &IngressClass{Name: "istio", Controller: IngressController, IsDefault: true, CreationTime: newer}
	olderTheirs := &IngressClass{Name: "a-nginx", Controller: "k8s.io/ingress-nginx", IsDefault: true, CreationTime: older}
	tiedOurs := &IngressClass{Name: "b-istio", Controller: IngressController, IsDefault: true, CreationTime: older}
	cases := []struct {
		name    string
		ing     Ingress
		classes []*IngressClass
		mode    IngressMode
		want    bool
	}{
		{"our class", Ingress{ClassName: "istio"}, []*IngressClass{ours, theirs}, IngressModeStrict, true},
		{"another controller's class", Ingress{ClassName: "nginx"}, []*IngressClass{ours, theirs}, IngressModeDefault, false},
		{"class that does not exist", Ingress{ClassName: "missing"}, []*IngressClass{ours}, IngressModeDefault, false},
		{"legacy annotation", Ingress{ClassAnnotation: new("istio")}, nil, IngressModeStrict, true},
		{"another annotation", Ingress{ClassAnnotation: new("nginx")}, nil, IngressModeDefault, false},
		{"class name wins over annotation", Ingress{ClassName: "nginx", ClassAnnotation: new("istio")}, []*IngressClass{theirs}, IngressModeDefault, false},
		// Present but empty is set, as for Istio: it names no class of ours,
		// and the API server gives no default class to such an Ingress.
		{"empty annotation, our default class", Ingress{ClassAnnotation: new("")}, []*IngressClass{defaultOurs}, IngressModeStrict, false},
		{"empty annotation, default mode", Ingress{ClassAnnotation: new("")}, []*IngressClass{ours}, IngressModeDefault, false},
		{"no class, our default class", Ingress{}, []*IngressClass{defaultOurs}, IngressModeStrict, true},
		{"no class, another default class", Ingress{}, []*IngressClass{defaultTheirs}, IngressModeDefault, false},
		{"no class, two defaults, the newer another controller's", Ingress{}, []*IngressClass{newerTheirs, olderOurs}, IngressModeStrict, false},
		{"no class, two defaults, the newer ours", Ingress{}, []*IngressClass{olderTheirs, newerOurs}, IngressModeStrict, true},
		{"no class, two defaults as new, the first by name another's", Ingress{}, []*IngressClass{olderTheirs, tiedOurs}, IngressModeDefault, false},
		{"no class, strict", Ingress{}, []*IngressClass{ours}, IngressModeStrict, false},
		{"no class, default mode", Ingress{}, []*IngressClass{ours}, IngressModeDefault, true},
		{"off takes nothing", Ingress{ClassName: "istio"}, []*IngressClass{ours}, IngressModeOff, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := IngressOwnership{Class: "istio", Mode: tc.mode}
			if got := o.Owns(&tc.ing, tc.classes); got != tc.want {
				t.Errorf("Owns = %v, want %v", got, tc.want)
			}
		})
	}
}
