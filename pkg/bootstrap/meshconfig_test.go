package bootstrap

import (
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func TestLoadMeshConfig(t *testing.T) {
	const mesh = `
rootNamespace: mesh-root
trustDomain: example.org
ingressClass: mesh-ingress
ingressControllerMode: DEFAULT
ingressService: gateway
ingressSelector: edge
enableAutoMtls: false
defaultConfig:
  discoveryAddress: istiod.istio-system.svc:15012
someFieldFromANewerIstio: true
`
	path := filepath.Join(t.TempDir(), "mesh")
	if err := os.WriteFile(path, []byte(mesh), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		explicit map[string]bool
		check    func(t *testing.T, o Options)
	}{
		{"the file sets every mesh setting", nil, func(t *testing.T, o Options) {
			if o.RootNamespace != "mesh-root" || o.Ingress.Class != "mesh-ingress" || o.Ingress.Mode != model.IngressModeDefault {
				t.Errorf("root %q class %q mode %q", o.RootNamespace, o.Ingress.Class, o.Ingress.Mode)
			}
			if o.TrustDomain != "example.org" {
				t.Errorf("trust domain %q, want the file's example.org", o.TrustDomain)
			}
			if !o.DisableAutoMTLS {
				t.Errorf("enableAutoMtls: false did not turn auto mTLS off")
			}
			if pc := pushContextOptions(&o); pc.TrustDomain != "example.org" || !pc.DisableAutoMTLS {
				t.Errorf("push context options %+v do not carry the trust domain and auto mTLS", pc)
			}
			if want := (model.NamespacedName{Namespace: "istio-system", Name: "gateway"}); o.Ingress.Service != want {
				t.Errorf("ingress service %v, want %v", o.Ingress.Service, want)
			}
			if !maps.Equal(o.Ingress.Selector, map[string]string{"istio": "edge"}) {
				t.Errorf("ingress selector %v", o.Ingress.Selector)
			}
		}},
		{"explicit flags win", map[string]bool{"root-namespace": true, "ingress-controller-mode": true, "trust-domain": true}, func(t *testing.T, o Options) {
			if o.RootNamespace != "istio-system" || o.Ingress.Mode != model.IngressModeStrict || o.TrustDomain != "cluster.local" {
				t.Errorf("flags lost to the file: root %q mode %q trust domain %q", o.RootNamespace, o.Ingress.Mode, o.TrustDomain)
			}
			if o.Ingress.Class != "mesh-ingress" {
				t.Errorf("settings without flags still come from the file; class %q", o.Ingress.Class)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			o.Webhook.Namespace = "istio-system"
			if err := o.LoadMeshConfig(path, func(flag string) bool { return tc.explicit[flag] }); err != nil {
				t.Fatal(err)
			}
			tc.check(t, o)
		})
	}
	o := DefaultOptions()
	if err := o.LoadMeshConfig(filepath.Join(t.TempDir(), "absent"), func(string) bool { return false }); err == nil {
		t.Error("a missing mesh config file was not an error")
	}
}

func TestLoadMeshConfigIngressServiceInAnotherNamespace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mesh")
	if err := os.WriteFile(path, []byte("ingressService: edge/gateway\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	if err := o.LoadMeshConfig(path, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if want := (model.NamespacedName{Namespace: "edge", Name: "gateway"}); o.Ingress.Service != want {
		t.Errorf("ingress service %v, want %v", o.Ingress.Service, want)
	}
}
