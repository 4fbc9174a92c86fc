package inject

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"text/template"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// templateFuncs are the helpers an injection template may call, named as
// in Helm where Helm has the same helper:
//
//	toYaml V            V as YAML, without the trailing newline
//	toJson V            V as JSON on one line (protobuf messages in their canonical JSON)
//	indent N S          S with every line indented by N spaces
//	nindent N S         a newline, then indent N S
//	default D V         V, or D when V is empty (nil, "", 0, false, empty map or list)
//	quote V             V as a double-quoted string, safe in YAML
//	annotation M K D    annotation K of object meta M, or D when unset
//	isset M K           whether map M has key K
//	podPorts SPEC       the ports of the Pod's containers, never nil
//	dict K V ...        a map of the given keys and values
func templateFuncs() template.FuncMap {
	return template.FuncMap{
		"toYaml":     toYAML,
		"toJson":     toJSON,
		"indent":     indent,
		"nindent":    func(n int, s string) string { return "\n" + indent(n, s) },
		"default":    defaultValue,
		"quote":      quote,
		"annotation": annotation,
		"isset":      func(m map[string]string, key string) bool { _, ok := m[key]; return ok },
		"podPorts":   podPorts,
		"dict":       dict,
	}
}

func toYAML(v any) (string, error) {
	data, err := yaml.Marshal(v)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(data), "\n"), nil
}

func toJSON(v any) (string, error) {
	if m, ok := v.(proto.Message); ok {
		return protoJSON(m)
	}
	data, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(data), nil
}

func indent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
}

func defaultValue(def, v any) any {
	if isEmpty(v) {
		return def
	}
	return v
}

func isEmpty(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String, reflect.Map, reflect.Slice, reflect.Array:
		return rv.Len() == 0
	case reflect.Pointer, reflect.Interface:
		return rv.IsNil()
	case reflect.Bool:
		return !rv.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return rv.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return rv.Float() == 0
	}
	return false
}

// quote JSON-encodes the value's text: a JSON string is a valid YAML
// double-quoted scalar, whatever characters it holds.
func quote(v any) string {
	s, ok := v.(string)
	if !ok && v != nil {
		s = fmt.Sprint(v)
	}
	data, _ := json.Marshal(s)
	return string(data)
}

func annotation(meta metav1.ObjectMeta, key string, def any) string {
	if value, ok := meta.Annotations[key]; ok {
		return value
	}
	if def == nil {
		return ""
	}
	return fmt.Sprint(def)
}

func podPorts(spec corev1.PodSpec) []corev1.ContainerPort {
	ports := []corev1.ContainerPort{}
	for _, c := range spec.Containers {
		ports = append(ports, c.Ports...)
	}
	return ports
}

func dict(kv ...any) (map[string]any, error) {
	if len(kv)%2 != 0 {
		return nil, fmt.Errorf("dict wants key-value pairs, got %d arguments", len(kv))
	}
	m := make(map[string]any, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		key, ok := kv[i].(string)
		if !ok {
			return nil, fmt.Errorf("dict key %v is not a string", kv[i])
		}
		m[key] = kv[i+1]
	}
	return m, nil
}
