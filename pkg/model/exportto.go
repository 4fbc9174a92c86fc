package model

import "slices"

// ExportTo is the set of namespaces that may see a service or config.
// A nil ExportTo means every namespace, as does one that contains "*".
// A non-nil empty ExportTo (from "~") means no namespace. Conversion resolves
// "." to the object's own namespace, so only "*" and names remain.
type ExportTo []string

// ExportToAll is the public visibility.
const ExportToAll = "*"

// Public reports whether every namespace may see the object.
func (e ExportTo) Public() bool {
	return e == nil || slices.Contains(e, ExportToAll)
}

// Allows reports whether namespace ns may see the object.
func (e ExportTo) Allows(ns string) bool {
	return e.Public() || slices.Contains(e, ns)
}
