package inject

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// patchOp is one RFC 6902 operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// createPatch returns the JSONPatch that turns the JSON document from into
// to. Objects are diffed key by key (sorted, for stable output); an array
// that grew or shrank in one place gets adds or removes at that place, and
// any other changed array of a different length is replaced whole.
func createPatch(from, to []byte) ([]byte, error) {
	var a, b any
	if err := json.Unmarshal(from, &a); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(to, &b); err != nil {
		return nil, err
	}
	ops := diffValues(nil, "", a, b)
	if ops == nil {
		ops = []patchOp{}
	}
	return json.Marshal(ops)
}

func diffValues(ops []patchOp, path string, a, b any) []patchOp {
	switch av := a.(type) {
	case map[string]any:
		if bv, ok := b.(map[string]any); ok {
			return diffObjects(ops, path, av, bv)
		}
	case []any:
		if bv, ok := b.([]any); ok {
			return diffArrays(ops, path, av, bv)
		}
	}
	if reflect.DeepEqual(a, b) {
		return ops
	}
	return append(ops, valueOp("replace", path, b))
}

func diffObjects(ops []patchOp, path string, a, b map[string]any) []patchOp {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		av, inA := a[k]
		bv, inB := b[k]
		p := path + "/" + escapePointer(k)
		switch {
		case !inB:
			ops = append(ops, patchOp{Op: "remove", Path: p})
		case !inA:
			ops = append(ops, valueOp("add", p, bv))
		default:
			ops = diffValues(ops, p, av, bv)
		}
	}
	return ops
}

func diffArrays(ops []patchOp, path string, a, b []any) []patchOp {
	if len(a) == len(b) {
		for i := range a {
			ops = diffValues(ops, path+"/"+strconv.Itoa(i), a[i], b[i])
		}
		return ops
	}
	prefix := 0
	for prefix < len(a) && prefix < len(b) && reflect.DeepEqual(a[prefix], b[prefix]) {
		prefix++
	}
	suffix := 0
	for suffix < len(a)-prefix && suffix < len(b)-prefix &&
		reflect.DeepEqual(a[len(a)-1-suffix], b[len(b)-1-suffix]) {
		suffix++
	}
	removed := a[prefix : len(a)-suffix]
	added := b[prefix : len(b)-suffix]
	switch {
	case len(removed) == 0:
		for i, v := range added {
			ops = append(ops, valueOp("add", path+"/"+strconv.Itoa(prefix+i), v))
		}
	case len(added) == 0:
		// Each removal shifts the rest down, so the same index repeats.
		for range removed {
			ops = append(ops, patchOp{Op: "remove", Path: path + "/" + strconv.Itoa(prefix)})
		}
	default:
		ops = append(ops, valueOp("replace", path, b))
	}
	return ops
}

// valueOp keeps an explicit null value: omitempty would drop it and leave
// an add or replace without a value, which RFC 6902 forbids.
func valueOp(op, path string, v any) patchOp {
	if v == nil {
		return patchOp{Op: op, Path: path, Value: json.RawMessage("null")}
	}
	return patchOp{Op: op, Path: path, Value: v}
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

func escapePointer(s string) string {
	return pointerEscaper.Replace(s)
}
