package xds

import (
	"slices"
	"time"
	"unsafe"
	"weak"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// watch is the state of one type URL on one connection.
type watch struct {
	typeURL  string
	resource model.WatchedResource
	// namesHash caches hashNames(resource.ResourceNames) when namesHashed.
	namesHash   uint64
	namesHashed bool
	// nameList holds the shared list resource.ResourceNames is, if it is
	// one (setSharedSubscription), so that it lives as long as w uses it.
	nameList *nameList
	// requested identifies the names, as the client sent them, of the last
	// request that set or repeated a named subscription; zero if none.
	requested requestNames
	// named: a SotW request of the type named a resource, or "*", on this
	// stream, which ends the legacy wildcard (see sotwRequest).
	named bool

	// sent is what the client holds, as far as the server knows: the last
	// resources sent (or, for delta, announced in initial_resource_versions).
	sent        sentSet
	sentNonce   string
	sentVersion string
	sentHash    uint64
	lastPush    time.Time

	ackedVersion string
	ackedNonce   string

	// warming are the names the client waits for after a CDS or LDS update
	// (see warming.go), or has subscribed to again (delta), sorted; the
	// next response carries them.
	warming []string

	// metrics are the type's metric children.
	metrics *typeMetrics

	nack *NackRecord
	// nackedHash is the content hash of the last rejected response; a
	// response with the same content is withheld until one is ACKed.
	nackedHash    uint64
	nackWithholds bool
}

// setSubscription replaces what w subscribes to. Callers that edit the names
// must hold c.mu, as for every watch field the debug endpoints read.
func (w *watch) setSubscription(names []string, wildcard bool) {
	w.resource.ResourceNames = names
	w.resource.Wildcard = wildcard
	w.nameList, w.namesHashed, w.requested = nil, false, requestNames{}
}

// setSharedSubscription makes w subscribe to list's names, which w shares
// with other streams and must not modify.
func (w *watch) setSharedSubscription(list *nameList) {
	w.resource.ResourceNames, w.resource.Wildcard = list.names, false
	w.nameList, w.namesHash, w.namesHashed, w.requested = list, list.hash, true, requestNames{}
}

// sotwRequest takes a SotW request that is applied to w, of names
// (without "*") and star (whether it named "*" too), and reports whether
// it subscribes to every resource of the type. "*" does, beside any names.
// A request of no names does only for LDS and CDS, and only while the
// client has never named anything of the type on the stream: once it has,
// an empty list means no resources, and a list without "*" ends the
// wildcard ("How the client specifies what resources to return"). Envoy,
// which never names listeners or clusters, keeps its legacy wildcard;
// grpc-go names them, and sends an empty list when it drops the last one.
func (w *watch) sotwRequest(names []string, star bool) (wildcard bool) {
	w.named = w.named || star || len(names) > 0
	return star || (!w.named && fullStateType(w.typeURL))
}

// subscriptionHash hashes the subscribed names, once per subscription.
func (w *watch) subscriptionHash() uint64 {
	if !w.namesHashed {
		w.namesHash, w.namesHashed = hashNames(w.resource.ResourceNames), true
	}
	return w.namesHash
}

// awaitsAnswer reports whether the client has neither ACKed nor NACKed the
// last response of w, which may then still be on its way to it.
func (w *watch) awaitsAnswer() bool {
	return w.sentNonce != "" && w.ackedNonce != w.sentNonce && (w.nack == nil || w.nack.Nonce != w.sentNonce)
}

// subscribed reports whether w currently asks for anything.
func (w *watch) subscribed() bool {
	return w.resource.Wildcard || len(w.resource.ResourceNames) > 0
}

// requestNames identifies a request's resource names in the order the
// client sent them. Envoy and gRPC repeat the whole subscription in every
// request of a type, in the same order while it is unchanged: 5,000 EDS
// names in each ACK of a 5,000-service sidecar. Sorting them anew for each
// ACK was 4% of the control plane's CPU under Service churn; a request
// whose names are the very list of the last one (identical requests share
// it, see requestNameLists), or hash the same, takes the subscription as it
// is. (A client that forges a collision changes nothing but its own
// subscription.)
type requestNames struct {
	first weak.Pointer[string]
	count int
	hash  uint64
	// sorted: the request listed its names sorted and without repeats, as
	// Envoy does, so they are the subscription and hash is its hash too.
	sorted bool
}

// namesOf returns the sorted, de-duplicated names of a request: w's
// subscription when they repeat the request that set it.
func (w *watch) namesOf(names []string) ([]string, requestNames) {
	if len(names) == 0 {
		return nil, requestNames{}
	}
	if w != nil && len(names) == w.requested.count && w.requested.first.Value() == &names[0] {
		return w.resource.ResourceNames, w.requested
	}
	r := requestNames{first: weak.Make(&names[0]), count: len(names), hash: hashNames(names)}
	if w != nil && r.count == w.requested.count && r.hash == w.requested.hash {
		return w.resource.ResourceNames, r
	}
	sorted := sortedNames(names)
	r.sorted = unsafe.SliceData(sorted) == unsafe.SliceData(names)
	return sorted, r
}

// splitWildcard takes the explicit wildcard "*" out of a request's sorted
// names, and reports whether it was there. "*" is no resource name: it asks
// for every resource of the type, and the other names beside it are
// subscribed to as well. (A SotW request that names "*" is a wildcard,
// whose names are neither interned nor recognized in the next request:
// what namesOf said of the request's list is not used.)
func splitWildcard(names []string) ([]string, bool) {
	i, found := slices.BinarySearch(names, wildcardName)
	if !found {
		return names, false
	}
	// names may be the client's list or a subscription other streams
	// share: it is not modified.
	return slices.Concat(names[:i], names[i+1:]), true
}

// sameNames reports whether a and b hold the same names in the same order.
// A request that repeats a subscription gets the subscription itself back
// from namesOf, and thousands of names need no comparing with themselves.
func sameNames(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	return len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b) || slices.Equal(a, b)
}

// subscribedBy records that a request of names r set or repeated w's
// current subscription. A wildcard is no list of names to hand out.
func (w *watch) subscribedBy(r requestNames) {
	if w.resource.Wildcard {
		r = requestNames{}
	}
	w.requested = r
}

// sortedNames returns resource names sorted and de-duplicated: names itself
// if it already is, as the lists of clients that keep their subscriptions
// sorted are (a connect storm's thousands of EDS names per sidecar), else
// a sorted copy. Neither may be modified.
func sortedNames(names []string) []string {
	if len(names) == 0 {
		return nil
	}
	if strictlySorted(names) {
		return names
	}
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.Compact(out)
}

// sortedUnion merges the sorted, de-duplicated lists a and b into a new
// one, in one pass; a itself when b adds nothing.
func sortedUnion(a, b []string) []string {
	if len(b) == 0 {
		return a
	}
	out := make([]string, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] < b[j]:
			out = append(out, a[i])
			i++
		case a[i] > b[j]:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i, j = i+1, j+1
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

func strictlySorted(names []string) bool {
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			return false
		}
	}
	return true
}
