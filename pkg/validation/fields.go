package validation

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	networking "istio.io/api/networking/v1"
	security "istio.io/api/security/v1beta1"
)

// The proto messages of the specs this package checks, for CheckFields.
var (
	DestinationRuleSpec    = (&networking.DestinationRule{}).ProtoReflect().Descriptor()
	PeerAuthenticationSpec = (&security.PeerAuthentication{}).ProtoReflect().Descriptor()
	VirtualServiceSpec     = (&networking.VirtualService{}).ProtoReflect().Descriptor()
)

// FieldError is one problem with one field of an object.
type FieldError struct {
	// Path names the field from the object's root: "spec.subsets[1].name".
	// List indexes and map keys go in brackets.
	Path    string
	Message string
	// Line is the field's line in the file it was read from, 0 when unknown
	// (objects from the API server have no lines).
	Line int
}

func (e *FieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s: %s", e.Line, e.Path, e.Message)
	}
	return e.Path + ": " + e.Message
}

// FieldErrors returns the field errors that err is or joins, in order; nil
// when err is nil or holds something else too.
func FieldErrors(err error) []*FieldError {
	if err == nil {
		return nil
	}
	var errs []error
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	} else {
		errs = []error{err}
	}
	out := make([]*FieldError, 0, len(errs))
	for _, e := range errs {
		var fe *FieldError
		if !errors.As(e, &fe) {
			return nil
		}
		out = append(out, fe)
	}
	return out
}

// CheckFields checks a spec as JSON decoded it (maps, slices, strings,
// json.Number or float64, bools and nils) against the proto message md it
// is meant for, as strictly as `kubectl --validate=strict` and Istio's
// validation do, and as the proto decoder would not: every field must
// exist, hold a value of its type (an enum value one of its names), and set
// at most one member of a oneof. It returns every problem, joined, each a
// *FieldError whose path starts at path ("spec"); nil when there is none.
func CheckFields(md protoreflect.MessageDescriptor, spec any, path string) error {
	var p problems
	p.message(md, spec, path)
	return p.err()
}

func (p *problems) message(md protoreflect.MessageDescriptor, v any, path string) {
	if v == nil {
		return
	}
	switch md.FullName() {
	case "google.protobuf.Duration":
		if s, ok := v.(string); !ok {
			p.add(path, "want a duration (such as \"5s\"), got %s", describe(v))
		} else if _, err := time.ParseDuration(s); err != nil {
			p.add(path, "want a duration (such as \"5s\"), got %q", s)
		}
		return
	case "google.protobuf.Timestamp":
		if s, ok := v.(string); !ok {
			p.add(path, "want an RFC 3339 timestamp, got %s", describe(v))
		} else if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
			p.add(path, "want an RFC 3339 timestamp, got %q", s)
		}
		return
	case "google.protobuf.DoubleValue", "google.protobuf.FloatValue", "google.protobuf.Int64Value",
		"google.protobuf.UInt64Value", "google.protobuf.Int32Value", "google.protobuf.UInt32Value",
		"google.protobuf.BoolValue", "google.protobuf.StringValue", "google.protobuf.BytesValue":
		p.scalar(md.Fields().ByName("value"), v, path)
		return
	case "google.protobuf.Value":
		return // any JSON value
	case "google.protobuf.Struct", "google.protobuf.Any", "google.protobuf.Empty":
		if _, ok := v.(map[string]any); !ok {
			p.add(path, "want an object, got %s", describe(v))
		}
		return
	case "google.protobuf.ListValue":
		if _, ok := v.([]any); !ok {
			p.add(path, "want a list, got %s", describe(v))
		}
		return
	}
	obj, ok := v.(map[string]any)
	if !ok {
		p.add(path, "want an object, got %s", describe(v))
		return
	}
	fields := md.Fields()
	setMember := map[protoreflect.FullName]string{}
	for _, key := range sortedKeys(obj) {
		child := path + "." + key
		fd := fields.ByJSONName(key)
		if fd == nil {
			fd = fields.ByName(protoreflect.Name(key))
		}
		if fd == nil {
			if hint := closestField(fields, key); hint != "" {
				p.add(child, "unknown field (did you mean %s?)", hint)
			} else {
				p.add(child, "unknown field")
			}
			continue
		}
		val := obj[key]
		if val == nil {
			continue // null leaves a field unset
		}
		if oo := fd.ContainingOneof(); oo != nil && !oo.IsSynthetic() {
			if other, dup := setMember[oo.FullName()]; dup {
				p.add(path, "%s and %s are mutually exclusive", other, key)
			}
			setMember[oo.FullName()] = key
		}
		switch {
		case fd.IsMap():
			m, ok := val.(map[string]any)
			if !ok {
				p.add(child, "want an object, got %s", describe(val))
				continue
			}
			for _, k := range sortedKeys(m) {
				entry := child + "[" + k + "]"
				if fd.MapKey().Kind() != protoreflect.StringKind {
					p.scalar(fd.MapKey(), k, entry)
				}
				p.value(fd.MapValue(), m[k], entry)
			}
		case fd.IsList():
			list, ok := val.([]any)
			if !ok {
				p.add(child, "want a list, got %s", describe(val))
				continue
			}
			for i, item := range list {
				p.value(fd, item, fmt.Sprintf("%s[%d]", child, i))
			}
		default:
			p.value(fd, val, child)
		}
	}
}

// value checks one value of a field (one element, for lists and maps).
func (p *problems) value(fd protoreflect.FieldDescriptor, v any, path string) {
	if v == nil {
		return
	}
	if md := fd.Message(); md != nil {
		p.message(md, v, path)
		return
	}
	p.scalar(fd, v, path)
}

// scalar checks a scalar as the proto JSON decoder reads it: integers as
// numbers or quoted numbers, floats also as "NaN" and "±Infinity", enums
// by name or number.
func (p *problems) scalar(fd protoreflect.FieldDescriptor, v any, path string) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		if _, ok := v.(bool); !ok {
			p.add(path, "want true or false, got %s", describe(v))
		}
	case protoreflect.StringKind:
		if _, ok := v.(string); !ok {
			p.add(path, "want a string, got %s", describe(v))
		}
	case protoreflect.BytesKind:
		s, ok := v.(string)
		if ok {
			_, err := base64.StdEncoding.DecodeString(s)
			ok = err == nil
		}
		if !ok {
			p.add(path, "want base64-encoded bytes, got %s", describe(v))
		}
	case protoreflect.EnumKind:
		p.enum(fd.Enum(), v, path)
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		s, ok := numberText(v)
		if ok && s != "NaN" && s != "Infinity" && s != "-Infinity" {
			_, err := strconv.ParseFloat(s, 64)
			ok = err == nil
		}
		if !ok {
			p.add(path, "want a number, got %s", describe(v))
		}
	default:
		p.integer(fd.Kind(), v, path)
	}
}

func (p *problems) integer(kind protoreflect.Kind, v any, path string) {
	bits, signed := 64, true
	switch kind {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		bits = 32
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		bits, signed = 32, false
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		signed = false
	}
	s, ok := numberText(v)
	if !ok {
		p.add(path, "want an integer, got %s", describe(v))
		return
	}
	var err error
	if signed {
		_, err = strconv.ParseInt(s, 10, bits)
	} else {
		_, err = strconv.ParseUint(s, 10, bits)
	}
	switch {
	case err == nil:
	case errors.Is(err, strconv.ErrRange):
		lo, hi := "0", strconv.FormatUint(math.MaxUint64>>(64-bits), 10)
		if signed {
			lo, hi = strconv.FormatInt(-1<<(bits-1), 10), strconv.FormatInt(1<<(bits-1)-1, 10)
		}
		p.add(path, "want an integer in %s..%s, got %s", lo, hi, describe(v))
	case !signed && strings.HasPrefix(s, "-"):
		p.add(path, "want a non-negative integer, got %s", describe(v))
	default:
		p.add(path, "want an integer, got %s", describe(v))
	}
}

func (p *problems) enum(ed protoreflect.EnumDescriptor, v any, path string) {
	if name, ok := v.(string); ok {
		if ed.Values().ByName(protoreflect.Name(name)) == nil {
			p.add(path, "want %s, got %q", enumNames(ed), name)
		}
		return
	}
	// A number names a value too, known or not (proto3 enums are open).
	if s, ok := numberText(v); ok {
		if _, err := strconv.ParseInt(s, 10, 32); err == nil {
			return
		}
	}
	p.add(path, "want %s, got %s", enumNames(ed), describe(v))
}

// enumNames lists an enum's value names: "A, B or C".
func enumNames(ed protoreflect.EnumDescriptor) string {
	values := ed.Values()
	names := make([]string, values.Len())
	for i := range names {
		names[i] = string(values.Get(i).Name())
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// numberText is the text of a JSON number, or of a string the proto
// decoder reads as one.
func numberText(v any) (string, bool) {
	switch n := v.(type) {
	case json.Number:
		return n.String(), true
	case float64:
		return strconv.FormatFloat(n, 'f', -1, 64), true
	case string:
		return n, true
	}
	return "", false
}

// describe shows a JSON value in a message, as the user wrote it where
// that is short.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return strconv.Quote(x)
	case bool:
		return strconv.FormatBool(x)
	case json.Number:
		return x.String()
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	}
	return fmt.Sprintf("%v", v)
}

// closestField suggests the field a misspelt key probably meant: the JSON
// name nearest to it, within two edits (ignoring case).
func closestField(fields protoreflect.FieldDescriptors, key string) string {
	best, bestDist := "", 3
	for i := range fields.Len() {
		name := fields.Get(i).JSONName()
		if d := editDistance(strings.ToLower(key), strings.ToLower(name)); d < bestDist {
			best, bestDist = name, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
