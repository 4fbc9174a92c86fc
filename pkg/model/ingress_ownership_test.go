package model

import "testing"

func TestIngressOwnership(t *testing.T) {
	ours := &IngressClass{Name: "istio", Controller: IngressController}
	theirs := &IngressClass{Name: "nginx", Controller: "k8s.io/ingress-nginx"}
	defaultOurs := &IngressClass{Name: "mesh", Controller: IngressController, IsDefault: true}
	defaultTheirs := &IngressClass{Name: "other", Controller: "example.com/other", IsDefault: true}
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
		{"legacy annotation", Ingress{ClassAnnotation: "istio"}, nil, IngressModeStrict, true},
		{"another annotation", Ingress{ClassAnnotation: "nginx"}, nil, IngressModeDefault, false},
		{"class name wins over annotation", Ingress{ClassName: "nginx", ClassAnnotation: "istio"}, []*IngressClass{theirs}, IngressModeDefault, false},
		{"no class, our default class", Ingress{}, []*IngressClass{defaultOurs}, IngressModeStrict, true},
		{"no class, another default class", Ingress{}, []*IngressClass{defaultTheirs}, IngressModeDefault, false},
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
