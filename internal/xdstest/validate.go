package xdstest

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

type validator interface{ ValidateAll() error }

// ValidateDeep runs go-control-plane's ValidateAll on m and on every message
// packed in an Any anywhere inside it, which ValidateAll itself skips. Packed
// types must be linked into the test binary; the generator that packed them
// imports them, so they are.
func ValidateDeep(m proto.Message) error {
	var errs []error
	if v, ok := m.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().FullName(), err))
		}
	}
	forEachAny(m.ProtoReflect(), func(a *anypb.Any) {
		inner, err := a.UnmarshalNew()
		if err != nil {
			errs = append(errs, fmt.Errorf("unpack %s: %w", a.GetTypeUrl(), err))
			return
		}
		if err := ValidateDeep(inner); err != nil {
			errs = append(errs, err)
		}
	})
	return errors.Join(errs...)
}

func forEachAny(m protoreflect.Message, fn func(*anypb.Any)) {
	visit := func(v protoreflect.Value) {
		msg := v.Message()
		if a, ok := msg.Interface().(*anypb.Any); ok {
			fn(a)
			return
		}
		forEachAny(msg, fn)
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				visit(v.List().Get(i))
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				visit(mv)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			visit(v)
		}
		return true
	})
}
