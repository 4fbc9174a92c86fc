package controllers

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/reflect/protoreflect"
	"istio.io/api/networking/v1alpha3"
	securityv1beta1 "istio.io/api/security/v1beta1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// specDescriptors are the proto messages of the Istio specs the file source
// decodes, by group and kind, for checkOneofs. PeerAuthentication has no
// oneof today; it is listed so that one added by istio.io/api is checked.
var specDescriptors = map[schema.GroupKind]protoreflect.MessageDescriptor{
	{Group: "networking.istio.io", Kind: "DestinationRule"}:  (&v1alpha3.DestinationRule{}).ProtoReflect().Descriptor(),
	{Group: "security.istio.io", Kind: "PeerAuthentication"}: (&securityv1beta1.PeerAuthentication{}).ProtoReflect().Descriptor(),
}

// checkOneofs walks decoded JSON alongside a proto message descriptor and
// fails if any object sets two members of one oneof.
func checkOneofs(md protoreflect.MessageDescriptor, v any, path string) error {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	setMember := map[protoreflect.FullName]string{}
	fields := md.Fields()
	for _, key := range sortedKeys(obj) {
		val := obj[key]
		fd := fields.ByJSONName(key)
		if fd == nil {
			fd = fields.ByName(protoreflect.Name(key))
		}
		if fd == nil || val == nil {
			continue
		}
		if oo := fd.ContainingOneof(); oo != nil && !oo.IsSynthetic() {
			if other, dup := setMember[oo.FullName()]; dup {
				return fmt.Errorf("%s: %s and %s are mutually exclusive", path, other, key)
			}
			setMember[oo.FullName()] = key
		}
		if fd.Message() == nil {
			continue
		}
		child := path + "." + key
		switch {
		case fd.IsMap():
			if vd := fd.MapValue().Message(); vd != nil {
				if m, ok := val.(map[string]any); ok {
					for _, k := range sortedKeys(m) {
						if err := checkOneofs(vd, m[k], child+"["+k+"]"); err != nil {
							return err
						}
					}
				}
			}
		case fd.IsList():
			if list, ok := val.([]any); ok {
				for i, item := range list {
					if err := checkOneofs(fd.Message(), item, fmt.Sprintf("%s[%d]", child, i)); err != nil {
						return err
					}
				}
			}
		default:
			if err := checkOneofs(fd.Message(), val, child); err != nil {
				return err
			}
		}
	}
	return nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
