package model

import "google.golang.org/protobuf/types/known/anypb"

// Resource is one generated xDS resource, marshalled once.
type Resource struct {
	Name     string
	Resource *anypb.Any
	// Aliases are other names the client subscribed to that this resource
	// answers (delta xDS): a node proxy that asks WDS for an address
	// "<network>/<ip>" gets the workload or service there under its own
	// name, with the address as an alias.
	Aliases []string
}

// Resources is a generator's output for one type URL.
type Resources []Resource
