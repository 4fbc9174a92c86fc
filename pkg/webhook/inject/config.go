package inject

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/template"

	"google.golang.org/protobuf/encoding/protojson"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	"sigs.k8s.io/yaml"
)

// The files of the mounted ConfigMap.
const (
	ConfigFile = "config"
	ValuesFile = "values"
)

type policy string

const (
	policyEnabled  policy = "enabled"
	policyDisabled policy = "disabled"
)

// configFile is the "config" file: the injection policy and templates.
type configFile struct {
	// Policy is enabled (Pods the selectors opted in are injected) or
	// disabled (only Pods with sidecar.istio.io/inject=true are); empty
	// means enabled.
	Policy policy `json:"policy"`
	// Templates are Go templates by name, each rendering a Pod fragment
	// that is strategically merged into the Pod.
	Templates map[string]string `json:"templates"`
	// DefaultTemplates are rendered, in order, for a Pod that does not name
	// its own with inject.istio.io/templates.
	DefaultTemplates []string `json:"defaultTemplates"`
}

// injectionConfig is one loaded ConfigMap, immutable once built.
type injectionConfig struct {
	policy           policy
	defaultTemplates []string
	templates        map[string]*template.Template
	// templateErrors holds the templates that did not parse: a Pod that
	// needs one of them fails admission with the error, which names the
	// template's line.
	templateErrors map[string]error
	values         map[string]any
	mesh           *meshv1alpha1.MeshConfig
	cni            bool
	holdProxy      bool
	// digest identifies the files' content, to log real changes only.
	digest [sha256.Size]byte
}

// Reload reads the configuration files again and, when they parse, makes
// them current. On error the previous configuration stays.
func (h *Handler) Reload() error {
	cfg, err := loadConfig(h.opts.ConfigDir, h.opts.XDSAddress)
	if err != nil {
		h.opts.Metrics.Reloads.WithLabelValues("error").Inc()
		return err
	}
	h.config.Store(cfg)
	h.opts.Metrics.Reloads.WithLabelValues("success").Inc()
	for name, terr := range cfg.templateErrors {
		h.opts.Logger.Error("injection template does not parse; Pods that need it will fail admission",
			"template", name, "err", terr)
	}
	return nil
}

func loadConfig(dir, xdsAddress string) (*injectionConfig, error) {
	if dir == "" {
		return parseConfig(DefaultConfig(), DefaultValues(), xdsAddress)
	}
	configData, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, fmt.Errorf("inject: read injection config: %w", err)
	}
	valuesData, err := os.ReadFile(filepath.Join(dir, ValuesFile))
	if err != nil {
		return nil, fmt.Errorf("inject: read injection values: %w", err)
	}
	return parseConfig(configData, valuesData, xdsAddress)
}

func parseConfig(configData, valuesData []byte, xdsAddress string) (*injectionConfig, error) {
	var file configFile
	if err := yaml.UnmarshalStrict(configData, &file); err != nil {
		return nil, fmt.Errorf("inject: parse %q file: %w", ConfigFile, err)
	}
	switch file.Policy {
	case "":
		file.Policy = policyEnabled
	case policyEnabled, policyDisabled:
	default:
		return nil, fmt.Errorf("inject: policy %q is neither %q nor %q", file.Policy, policyEnabled, policyDisabled)
	}
	if len(file.DefaultTemplates) == 0 {
		file.DefaultTemplates = []string{"sidecar"}
	}

	values := map[string]any{}
	if err := yaml.Unmarshal(valuesData, &values); err != nil {
		return nil, fmt.Errorf("inject: parse %q file: %w", ValuesFile, err)
	}
	if values == nil {
		values = map[string]any{}
	}
	mesh, err := meshFromValues(values, xdsAddress)
	if err != nil {
		return nil, err
	}

	cfg := &injectionConfig{
		policy:           file.Policy,
		defaultTemplates: file.DefaultTemplates,
		templates:        make(map[string]*template.Template, len(file.Templates)),
		templateErrors:   map[string]error{},
		values:           values,
		mesh:             mesh,
		cni:              truthy(lookup(values, "istio_cni", "enabled")),
		holdProxy:        truthy(lookup(values, "global", "proxy", "holdApplicationUntilProxyStarts")),
		digest:           sha256.Sum256(append(append(slices.Clip(configData), 0), valuesData...)),
	}
	for name, text := range file.Templates {
		t, err := newTemplate(name, text)
		if err != nil {
			cfg.templateErrors[name] = err
			continue
		}
		cfg.templates[name] = t
	}
	return cfg, nil
}

// meshFromValues reads values.meshConfig, whose defaultConfig is the mesh's
// default proxy config; the proxy's discovery address defaults to ours.
func meshFromValues(values map[string]any, xdsAddress string) (*meshv1alpha1.MeshConfig, error) {
	mesh := &meshv1alpha1.MeshConfig{}
	if raw, ok := values["meshConfig"]; ok && raw != nil {
		data, err := json.Marshal(raw)
		if err != nil {
			return nil, fmt.Errorf("inject: values.meshConfig: %w", err)
		}
		// The chart may carry fields newer than our copy of the API.
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, mesh); err != nil {
			return nil, fmt.Errorf("inject: values.meshConfig: %w", err)
		}
	}
	if mesh.DefaultConfig == nil {
		mesh.DefaultConfig = &meshv1alpha1.ProxyConfig{}
	}
	if mesh.DefaultConfig.DiscoveryAddress == "" {
		mesh.DefaultConfig.DiscoveryAddress = xdsAddress
	}
	return mesh, nil
}

// newTemplate parses an injection template with the helpers. A missing
// map key is nil, not an error, so optional values need no guards.
func newTemplate(name, text string) (*template.Template, error) {
	return template.New(name).Funcs(templateFuncs()).Option("missingkey=zero").Parse(text)
}

// errNoTemplates is returned when a Pod's annotation selects no template.
var errNoTemplates = errors.New("the injection configuration selects no template")

// selectTemplates returns the templates to render for a Pod, or an error
// naming a missing or broken one.
func (c *injectionConfig) selectTemplates(annotations map[string]string) ([]*template.Template, error) {
	names := c.defaultTemplates
	if list, ok := annotations[AnnotationTemplates]; ok {
		names = nil
		for name := range strings.SplitSeq(list, ",") {
			if name = strings.TrimSpace(name); name != "" {
				names = append(names, name)
			}
		}
	}
	if len(names) == 0 {
		return nil, errNoTemplates
	}
	out := make([]*template.Template, 0, len(names))
	for _, name := range names {
		if err, ok := c.templateErrors[name]; ok {
			return nil, fmt.Errorf("injection template %q does not parse: %w", name, err)
		}
		t, ok := c.templates[name]
		if !ok {
			known := make([]string, 0, len(c.templates)+len(c.templateErrors))
			for k := range c.templates {
				known = append(known, k)
			}
			for k := range c.templateErrors {
				known = append(known, k)
			}
			slices.Sort(known)
			return nil, fmt.Errorf("injection template %q not found; the configuration has %v", name, known)
		}
		out = append(out, t)
	}
	return out, nil
}

func lookup(values map[string]any, path ...string) any {
	var cur any = values
	for _, key := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[key]
	}
	return cur
}

func truthy(v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case string:
		return strings.EqualFold(v, "true")
	}
	return false
}
