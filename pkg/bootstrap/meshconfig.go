package bootstrap

import (
	"fmt"
	"os"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// meshConfigFile is where o's mesh settings came from, kept so that a
// running Server can re-read it and say what changed.
type meshConfigFile struct {
	path     string
	explicit func(flag string) bool
	// base is o before the file was applied: flags and defaults. A setting
	// removed from the file falls back to it.
	base Options
}

// LoadMeshConfig applies the mesh settings of an Istio mesh config file (the
// "mesh" key of the istio[-REV] ConfigMap) to o: rootNamespace,
// trustDomain, ingressClass, ingressControllerMode, ingressService and ingressSelector.
// A setting whose flag the user gave explicitly (explicit reports it) keeps
// the flag's value. Fields meshpilot does not use are accepted and ignored,
// so Istio's mesh configs load unchanged. A Server built from o watches the
// file and logs every later change of these settings.
func (o *Options) LoadMeshConfig(path string, explicit func(flag string) bool) error {
	base := *o
	if err := o.applyMeshConfig(path, explicit); err != nil {
		return err
	}
	o.meshConfig = &meshConfigFile{path: path, explicit: explicit, base: base}
	return nil
}

func (o *Options) applyMeshConfig(path string, explicit func(flag string) bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("mesh config: %w", err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return fmt.Errorf("mesh config %s: %w", path, err)
	}
	mesh := &meshv1alpha1.MeshConfig{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(js, mesh); err != nil {
		return fmt.Errorf("mesh config %s: %w", path, err)
	}
	set := func(flag, value string, apply func(string)) {
		if value != "" && !explicit(flag) {
			apply(value)
		}
	}
	set("root-namespace", mesh.GetRootNamespace(), func(v string) { o.RootNamespace = v })
	set("trust-domain", mesh.GetTrustDomain(), func(v string) { o.TrustDomain = v })
	if auto := mesh.GetEnableAutoMtls(); auto != nil {
		o.DisableAutoMTLS = !auto.GetValue()
	}
	set("ingress-class", mesh.GetIngressClass(), func(v string) { o.Ingress.Class = v })
	if m := mesh.GetIngressControllerMode(); m != meshv1alpha1.MeshConfig_UNSPECIFIED {
		set("ingress-controller-mode", m.String(), func(v string) { o.Ingress.Mode = model.IngressMode(v) })
	}
	// As in Istio, a bare gateway Service name means the Service beside the
	// control plane; "namespace/name" names another namespace.
	set("ingress-service", mesh.GetIngressService(), func(v string) {
		ns, name, found := strings.Cut(v, "/")
		if !found {
			ns, name = o.Webhook.Namespace, v
		}
		o.Ingress.Service = model.NamespacedName{Namespace: ns, Name: name}
	})
	set("ingress-selector", mesh.GetIngressSelector(), func(v string) {
		o.Ingress.Selector = map[string]string{"istio": v}
	})
	return nil
}
