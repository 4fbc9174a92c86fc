package inject

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"
)

// TemplateData is what an injection template is executed with.
type TemplateData struct {
	// ObjectMeta and Spec are the Pod's, as the API server sent them.
	ObjectMeta metav1.ObjectMeta
	Spec       corev1.PodSpec
	// Values is the ConfigMap's values file.
	Values map[string]any
	// ProxyConfig is the mesh default proxy config with the Pod's
	// proxy.istio.io/config annotation merged over it.
	ProxyConfig *meshv1alpha1.ProxyConfig
	// MeshConfig is values.meshConfig.
	MeshConfig *meshv1alpha1.MeshConfig
	// Revision is the injector's revision, "" for the default.
	Revision string
	// XDSAddress is the control plane's xDS (and CA) address.
	XDSAddress string
	// DomainSuffix is the cluster's DNS suffix.
	DomainSuffix string
	// HoldApplicationUntilProxyStarts is true when the proxy must start
	// before the application (from the proxy config or the values); the
	// proxy container is then placed first.
	HoldApplicationUntilProxyStarts bool
}

// sidecarStatus is the sidecar.istio.io/status annotation: what the
// templates added, so that tools (and re-injection) can tell injected parts
// from the user's.
type sidecarStatus struct {
	InitContainers   []string `json:"initContainers"`
	Containers       []string `json:"containers"`
	Volumes          []string `json:"volumes"`
	ImagePullSecrets []string `json:"imagePullSecrets"`
	Revision         string   `json:"revision"`
}

// inject renders the Pod's templates, merges them into the Pod and returns
// the JSONPatch from the Pod to the result.
func (h *Handler) inject(cfg *injectionConfig, pod *corev1.Pod) ([]byte, error) {
	// managedFields can be large and never matter to injection.
	pod.ManagedFields = nil
	original, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	templates, err := cfg.selectTemplates(pod.Annotations)
	if err != nil {
		return nil, err
	}
	proxyConfig, err := podProxyConfig(cfg.mesh.DefaultConfig, pod.Annotations)
	if err != nil {
		return nil, err
	}
	data := &TemplateData{
		ObjectMeta:                      pod.ObjectMeta,
		Spec:                            pod.Spec,
		Values:                          cfg.values,
		ProxyConfig:                     proxyConfig,
		MeshConfig:                      cfg.mesh,
		Revision:                        h.opts.Revision,
		XDSAddress:                      h.opts.XDSAddress,
		DomainSuffix:                    h.opts.DomainSuffix,
		HoldApplicationUntilProxyStarts: cfg.holdProxy || proxyConfig.GetHoldApplicationUntilProxyStarts().GetValue(),
	}

	merged := original
	var added corev1.PodSpec
	for _, t := range templates {
		fragment, fragmentPod, err := render(t, data)
		if err != nil {
			return nil, err
		}
		if merged, err = strategicpatch.StrategicMergePatch(merged, fragment, corev1.Pod{}); err != nil {
			return nil, fmt.Errorf("merge injection template %q into the Pod: %w", t.Name(), err)
		}
		addNames(&added, &fragmentPod.Spec)
	}
	var out corev1.Pod
	if err := json.Unmarshal(merged, &out); err != nil {
		return nil, fmt.Errorf("decode injected Pod: %w", err)
	}
	if err := finishPod(&out, &added, h.opts.Revision, data.HoldApplicationUntilProxyStarts); err != nil {
		return nil, err
	}
	final, err := json.Marshal(&out)
	if err != nil {
		return nil, err
	}
	return createPatch(original, final)
}

// render executes one template and returns its Pod fragment as JSON and
// decoded. Every error names the template and, where one is known, the
// line: text/template errors carry the template's line, YAML and field
// errors the rendered line, which is quoted.
func render(t *template.Template, data *TemplateData) ([]byte, *corev1.Pod, error) {
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return nil, nil, fmt.Errorf("injection template %q: %w", t.Name(), err)
	}
	// Like Helm: a missing value renders as nothing rather than "<no value>".
	text := bytes.ReplaceAll(buf.Bytes(), []byte("<no value>"), nil)
	fragment, err := yaml.YAMLToJSON(text)
	if err != nil {
		return nil, nil, fmt.Errorf("injection template %q rendered invalid YAML: %w%s", t.Name(), err, renderedContext(text, err))
	}
	// Strict decoding reports a misspelt field instead of dropping it.
	dec := json.NewDecoder(bytes.NewReader(fragment))
	dec.DisallowUnknownFields()
	var pod corev1.Pod
	if err := dec.Decode(&pod); err != nil {
		return nil, nil, fmt.Errorf("injection template %q rendered an invalid Pod: %w%s", t.Name(), err, renderedContext(text, err))
	}
	return fragment, &pod, nil
}

// addNames records, once each, the names of what a fragment injects.
func addNames(into, fragment *corev1.PodSpec) {
	for _, c := range fragment.InitContainers {
		if !hasContainer(into.InitContainers, c.Name) {
			into.InitContainers = append(into.InitContainers, corev1.Container{Name: c.Name})
		}
	}
	for _, c := range fragment.Containers {
		if !hasContainer(into.Containers, c.Name) {
			into.Containers = append(into.Containers, corev1.Container{Name: c.Name})
		}
	}
	for _, v := range fragment.Volumes {
		if !slices.ContainsFunc(into.Volumes, func(have corev1.Volume) bool { return have.Name == v.Name }) {
			into.Volumes = append(into.Volumes, corev1.Volume{Name: v.Name})
		}
	}
	for _, s := range fragment.ImagePullSecrets {
		if !slices.Contains(into.ImagePullSecrets, s) {
			into.ImagePullSecrets = append(into.ImagePullSecrets, s)
		}
	}
}

var (
	yamlLineRE     = regexp.MustCompile(`line (\d+)`)
	unknownFieldRE = regexp.MustCompile(`unknown field "([^"]+)"`)
)

// renderedContext quotes the rendered line an error is about, since it
// differs from the template's line numbering.
func renderedContext(text []byte, err error) string {
	lines := strings.Split(string(text), "\n")
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		if n, convErr := strconv.Atoi(m[1]); convErr == nil && n >= 1 && n <= len(lines) {
			return fmt.Sprintf(" (rendered line %d: %q)", n, strings.TrimSpace(lines[n-1]))
		}
	}
	if m := unknownFieldRE.FindStringSubmatch(err.Error()); m != nil {
		// The field is the last element of a dotted path.
		field := m[1][strings.LastIndex(m[1], ".")+1:]
		for i, line := range lines {
			if strings.HasPrefix(strings.TrimLeft(strings.TrimSpace(line), "- "), field+":") {
				return fmt.Sprintf(" (rendered line %d: %q)", i+1, strings.TrimSpace(line))
			}
		}
	}
	return ""
}

// finishPod does what a template cannot: it orders the injected containers
// and records what was injected.
func finishPod(pod *corev1.Pod, added *corev1.PodSpec, revision string, holdApplication bool) error {
	// The proxy goes last so that kubectl exec and logs default to the
	// application, unless the application must wait for it.
	if holdApplication {
		pod.Spec.Containers = moveContainer(pod.Spec.Containers, ProxyContainerName, true)
	} else {
		pod.Spec.Containers = moveContainer(pod.Spec.Containers, ProxyContainerName, false)
	}
	// iptables go in last, so the user's init containers still reach the
	// network directly.
	pod.Spec.InitContainers = moveContainer(pod.Spec.InitContainers, InitContainerName, false)

	status := sidecarStatus{Revision: revision}
	if status.Revision == "" {
		status.Revision = defaultRevisionName
	}
	for _, c := range added.InitContainers {
		status.InitContainers = append(status.InitContainers, c.Name)
	}
	for _, c := range added.Containers {
		status.Containers = append(status.Containers, c.Name)
	}
	for _, v := range added.Volumes {
		status.Volumes = append(status.Volumes, v.Name)
	}
	for _, s := range added.ImagePullSecrets {
		status.ImagePullSecrets = append(status.ImagePullSecrets, s.Name)
	}
	value, err := json.Marshal(status)
	if err != nil {
		return err
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnotationStatus] = string(value)
	return nil
}

func moveContainer(containers []corev1.Container, name string, first bool) []corev1.Container {
	i := -1
	for j := range containers {
		if containers[j].Name == name {
			i = j
			break
		}
	}
	if i < 0 {
		return containers
	}
	c := containers[i]
	rest := append(containers[:i:i], containers[i+1:]...)
	if first {
		return append([]corev1.Container{c}, rest...)
	}
	return append(rest, c)
}
