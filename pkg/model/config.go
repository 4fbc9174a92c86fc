package model

import (
	"time"

	"google.golang.org/protobuf/proto"
)

// NamespacedName names an object within a namespace.
type NamespacedName struct {
	Namespace string
	Name      string
}

func (n NamespacedName) String() string { return n.Namespace + "/" + n.Name }

// Config is an Istio configuration object (for now, a DestinationRule) with
// its metadata. Spec is shared and must never be mutated.
type Config struct {
	Kind         Kind
	Name         string
	Namespace    string
	Labels       map[string]string
	Annotations  map[string]string
	Revision     string // the source's version of the object (resourceVersion)
	Generation   int64
	CreationTime time.Time
	Spec         proto.Message
}

// Key identifies the config in the store.
func (c *Config) Key() ConfigKey {
	return ConfigKey{Kind: c.Kind, Namespace: c.Namespace, Name: c.Name}
}
