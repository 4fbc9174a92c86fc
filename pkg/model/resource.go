package model

import "google.golang.org/protobuf/types/known/anypb"

// Resource is one generated xDS resource, marshalled once.
type Resource struct {
	Name     string
	Resource *anypb.Any
}

// Resources is a generator's output for one type URL.
type Resources []Resource
