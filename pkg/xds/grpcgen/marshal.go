package grpcgen

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/pkg/model"

	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// marshalAny wraps m in an Any with deterministic encoding, so identical
// resources have identical bytes (and stable hashes and versions).
func marshalAny(m proto.Message) (*anypb.Any, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	return &anypb.Any{
		TypeUrl: resource.APITypePrefix + string(m.ProtoReflect().Descriptor().FullName()),
		Value:   b,
	}, nil
}

func marshalResource(name string, m proto.Message) (model.Resource, error) {
	a, err := marshalAny(m)
	if err != nil {
		return model.Resource{}, err
	}
	return model.Resource{Name: name, Resource: a}, nil
}

// nameSet tracks emitted resource names when a wildcard subscription and
// explicit names overlap. A nil set records nothing and contains nothing.
type nameSet map[string]struct{}

func (s nameSet) add(name string) {
	if s != nil {
		s[name] = struct{}{}
	}
}

func (s nameSet) has(name string) bool {
	_, ok := s[name]
	return ok
}
