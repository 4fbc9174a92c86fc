package tags

import (
	"fmt"
	"strings"
)

// RevisionNotFoundError says that a revision has no injector to copy.
type RevisionNotFoundError struct {
	Revision string
	Injector string // the configuration that was looked for
}

func (e *RevisionNotFoundError) Error() string {
	return fmt.Sprintf("revision %q has no injector: MutatingWebhookConfiguration %s not found "+
		"(is that control-plane revision installed?)", e.Revision, e.Injector)
}

// TagExistsError says that a tag already points elsewhere and moving it was
// not asked for.
type TagExistsError struct {
	Tag             string
	CurrentRevision string
	WantedRevision  string
}

func (e *TagExistsError) Error() string {
	return fmt.Sprintf("tag %q already points to revision %q; pass --overwrite to retarget it to %q",
		e.Tag, e.CurrentRevision, e.WantedRevision)
}

// TagNotFoundError says that a tag has no webhook configuration.
type TagNotFoundError struct {
	Tag     string
	Webhook string
}

func (e *TagNotFoundError) Error() string {
	return fmt.Sprintf("tag %q does not exist: MutatingWebhookConfiguration %s not found", e.Tag, e.Webhook)
}

// TagInUseError says that removing a tag would strand namespaces that opt
// into injection through it.
type TagInUseError struct {
	Tag        string
	Namespaces []string
}

func (e *TagInUseError) Error() string {
	return fmt.Sprintf("tag %q is still used by %d namespace(s): %s; relabel them first or pass --force",
		e.Tag, len(e.Namespaces), strings.Join(e.Namespaces, ", "))
}

// TagShadowsRevisionError says that a tag would take the name of an
// installed revision, making istio.io/rev=TAG ambiguous.
type TagShadowsRevisionError struct {
	Tag      string
	Injector string
}

func (e *TagShadowsRevisionError) Error() string {
	return fmt.Sprintf("cannot create tag %q: control-plane revision %q exists (MutatingWebhookConfiguration %s), "+
		"and istio.io/rev=%s would select both", e.Tag, e.Tag, e.Injector, e.Tag)
}
