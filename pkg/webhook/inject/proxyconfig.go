package inject

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	"sigs.k8s.io/yaml"
)

// podProxyConfig is the mesh's default proxy config with the Pod's
// proxy.istio.io/config annotation over it. Each field the annotation sets
// replaces the default's, except proxyMetadata, whose keys are merged, as
// Istio does. The result is the Pod's own copy: templates can call methods
// on it, and the defaults are shared by every request.
func podProxyConfig(defaults *meshv1alpha1.ProxyConfig, annotations map[string]string) (*meshv1alpha1.ProxyConfig, error) {
	text, ok := annotations[AnnotationProxyConfig]
	if !ok {
		return proto.Clone(defaults).(*meshv1alpha1.ProxyConfig), nil
	}
	data, err := yaml.YAMLToJSON([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("annotation %s is not YAML: %w", AnnotationProxyConfig, err)
	}
	overlay := &meshv1alpha1.ProxyConfig{}
	// Unknown fields are errors here: a misspelt field in a user's
	// annotation should be reported, not silently dropped.
	if err := protojson.Unmarshal(data, overlay); err != nil {
		// protojson randomly swaps spaces for non-breaking ones in its
		// messages to stop callers matching them; undo that so the
		// message reads (and compares) plainly.
		return nil, fmt.Errorf("annotation %s is not a ProxyConfig: %s", AnnotationProxyConfig,
			strings.ReplaceAll(err.Error(), "\u00a0", " "))
	}
	merged := proto.Clone(defaults).(*meshv1alpha1.ProxyConfig)
	dst := merged.ProtoReflect()
	overlay.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.IsMap() {
			into := dst.Mutable(fd).Map()
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				into.Set(k, mv)
				return true
			})
			return true
		}
		dst.Set(fd, v)
		return true
	})
	return merged, nil
}

// protoJSON is a message's canonical JSON on one line. protojson's output
// varies its whitespace on purpose; compacting it keeps rendered Pods (and
// golden files) stable.
func protoJSON(m proto.Message) (string, error) {
	data, err := protojson.Marshal(m)
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, data); err != nil {
		return "", err
	}
	return out.String(), nil
}
