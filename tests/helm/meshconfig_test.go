package helm

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshpilot/meshpilot/pkg/bootstrap"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// TestMeshConfigLoads renders the mesh ConfigMap with meshConfig values a
// user may set and has pilot load it as the pod does (--mesh-config): every
// value must arrive as the string it was set to. YAML reads a bare OFF, yes
// or 123 as a boolean or a number, so a value the chart does not quote
// stops the control plane from starting.
func TestMeshConfigLoads(t *testing.T) {
	tl := newTools(t)
	for _, tc := range []struct {
		name string
		set  []string
		want func(o *bootstrap.Options) (got, want any)
	}{
		{"ingress controller mode OFF", []string{"meshConfig.ingressControllerMode=OFF"},
			func(o *bootstrap.Options) (any, any) { return o.Ingress.Mode, model.IngressModeOff }},
		{"ingress controller mode DEFAULT", []string{"meshConfig.ingressControllerMode=DEFAULT"},
			func(o *bootstrap.Options) (any, any) { return o.Ingress.Mode, model.IngressModeDefault }},
		{"ingress class that YAML reads as a boolean", []string{"meshConfig.ingressClass=yes"},
			func(o *bootstrap.Options) (any, any) { return o.Ingress.Class, "yes" }},
		{"ingress selector that YAML reads as a boolean", []string{"meshConfig.ingressSelector=on"},
			func(o *bootstrap.Options) (any, any) { return o.Ingress.Selector["istio"], "on" }},
		{"ingress service in another namespace", []string{"meshConfig.ingressService=gateways/public"},
			func(o *bootstrap.Options) (any, any) {
				return o.Ingress.Service, model.NamespacedName{Namespace: "gateways", Name: "public"}
			}},
		{"trust domain", []string{"meshConfig.trustDomain=example.org"},
			func(o *bootstrap.Options) (any, any) { return o.TrustDomain, "example.org" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", "istiod", tl.chart("pilot"), "--namespace", releaseNamespace,
				"--show-only", "templates/configmap.yaml"}
			for _, s := range tc.set {
				args = append(args, "--set-string", s)
			}
			cm := renderedKind[corev1.ConfigMap](t, tl.run(t, "", tl.helm, args...), "ConfigMap")
			path := filepath.Join(t.TempDir(), "mesh")
			if err := os.WriteFile(path, []byte(cm.Data["mesh"]), 0o644); err != nil {
				t.Fatal(err)
			}
			o := bootstrap.DefaultOptions()
			if err := o.LoadMeshConfig(path, func(string) bool { return false }); err != nil {
				t.Fatalf("pilot cannot load the rendered mesh config: %v\n%s", err, cm.Data["mesh"])
			}
			if got, want := tc.want(&o); got != want {
				t.Errorf("got %v, want %v, from:\n%s", got, want, cm.Data["mesh"])
			}
		})
	}
}
