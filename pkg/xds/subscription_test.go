package xds

import (
	"fmt"
	"slices"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// hosts are the hostnames of the fixture services named, "*" left as it is.
func hosts(short ...string) []string {
	out := make([]string, 0, len(short))
	for _, s := range short {
		if s != wildcardName {
			s = hostname(s)
		}
		out = append(out, s)
	}
	return out
}

// sotwStep is one request of a SotW subscription and what it must bring.
type sotwStep struct {
	names []string // resource_names, as short service names or "*"
	// ack: the request carries the version and nonce of the type's last
	// response; else it carries none.
	ack bool
	// want is what the one response to the request holds; nil: no response.
	want     []string
	wildcard bool // the subscription is a wildcard afterwards
}

// runSotWSteps sends steps of typeURL on one stream of seedAB (services a
// and b), checking each answer and the subscription it leaves.
func runSotWSteps(t *testing.T, typeURL string, steps []sotwStep) {
	t.Helper()
	h := newHarness(t, harnessConfig{seed: seedAB})
	c := h.sotw("client")
	var last *discoveryv3.DiscoveryResponse
	for i, s := range steps {
		req := &discoveryv3.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: hosts(s.names...)}
		if s.ack {
			req.VersionInfo, req.ResponseNonce = last.GetVersionInfo(), last.GetNonce()
		}
		c.send(req)
		var got [][]string
		for _, r := range c.barrier() {
			got = append(got, names(r.GetResources(), resourceName))
			last = r
		}
		want := [][]string{hosts(s.want...)}
		if s.want == nil {
			want = nil
		}
		if !slices.EqualFunc(got, want, func(a, b []string) bool { return slices.Equal(a, b) }) {
			t.Fatalf("step %d %v (ack %v): responses %v, want %v", i, s.names, s.ack, got, want)
		}
		if st := h.syncStatus("client", typeURL); st.Wildcard != s.wildcard {
			t.Fatalf("step %d %v: wildcard %v, want %v", i, s.names, st.Wildcard, s.wildcard)
		}
	}
}

// TestSotWSubscriptions: which resources a SotW request subscribes to, by
// the xDS protocol ("How the client specifies what resources to return").
// "*" is the explicit wildcard, in SotW as in delta, with or without
// other names; it is never a resource name.
func TestSotWSubscriptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		typeURL string
		steps   []sotwStep
	}{
		{"explicit wildcard", ClusterType, []sotwStep{
			{names: []string{"*"}, want: []string{"a", "b"}, wildcard: true},
			{names: []string{"*"}, ack: true, wildcard: true},
		}},
		{"wildcard and a name", ClusterType, []sotwStep{
			{names: []string{"a", "*"}, want: []string{"a", "b"}, wildcard: true},
		}},
		{"explicit wildcard of a type without a legacy one", EndpointType, []sotwStep{
			{names: []string{"*"}, want: []string{"a", "b"}, wildcard: true},
		}},
		{"a name, then the wildcard beside it", EndpointType, []sotwStep{
			{names: []string{"a"}, want: []string{"a"}},
			// An EDS response carries only what the client lacks.
			{names: []string{"a", "*"}, ack: true, want: []string{"b"}, wildcard: true},
		}},
		{"legacy wildcard, then the explicit one", ClusterType, []sotwStep{
			{want: []string{"a", "b"}, wildcard: true},
			{names: []string{"*"}, ack: true, wildcard: true},
		}},
		// Envoy asks for listeners and clusters with no names, always.
		{"legacy wildcard kept", ClusterType, []sotwStep{
			{want: []string{"a", "b"}, wildcard: true},
			{ack: true, wildcard: true},
			{want: []string{"a", "b"}, wildcard: true},
		}},
		// A list replaces the legacy wildcard, and an explicit one.
		{"legacy wildcard, then a name", ClusterType, []sotwStep{
			{want: []string{"a", "b"}, wildcard: true},
			{names: []string{"a"}, ack: true, want: []string{"a"}},
		}},
		{"legacy LDS wildcard, then a name", ListenerType, []sotwStep{
			{want: []string{"a", "b"}, wildcard: true},
			{names: []string{"b"}, ack: true, want: []string{"b"}},
		}},
		{"wildcard and a name, then the name alone", ClusterType, []sotwStep{
			{names: []string{"*", "a"}, want: []string{"a", "b"}, wildcard: true},
			{names: []string{"a"}, ack: true, want: []string{"a"}},
		}},
		// Once the client named something, no names means none, with a
		// nonce or without one (grpc-go dropping its last listener before
		// any response of the type reached it).
		{"names, then none", ClusterType, []sotwStep{
			{names: []string{"a"}, want: []string{"a"}},
			{ack: true},
		}},
		{"names, then none without a nonce", ClusterType, []sotwStep{
			{names: []string{"a"}, want: []string{"a"}},
			{},
		}},
		{"the explicit wildcard, then none", ClusterType, []sotwStep{
			{names: []string{"*"}, want: []string{"a", "b"}, wildcard: true},
			{ack: true},
			{},
		}},
		{"the legacy wildcard made explicit, then none", ClusterType, []sotwStep{
			{want: []string{"a", "b"}, wildcard: true},
			{names: []string{"*"}, ack: true, wildcard: true},
			{ack: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { runSotWSteps(t, tc.typeURL, tc.steps) })
	}
}

// deltaStep is one delta request of a type and what it must bring.
type deltaStep struct {
	subscribe, unsubscribe []string // short service names or "*"
	// holds are initial_resource_versions: these names at the versions
	// the server serves now.
	holds []string
	ack   bool // carries the nonce of the type's last response
	// want and removed are what the one response to the request holds;
	// both nil: no response.
	want, removed []string
}

// runDeltaSteps sends steps of typeURL on one delta stream of seedAB,
// checking each answer.
func runDeltaSteps(t *testing.T, typeURL string, steps []deltaStep) {
	t.Helper()
	h := newHarness(t, harnessConfig{seed: seedAB})
	ref := h.delta("reference")
	ref.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: []string{wildcardName}})
	versions := deltaVersions(ref.expect(typeURL))
	c := h.delta("client")
	var last *discoveryv3.DeltaDiscoveryResponse
	for i, s := range steps {
		req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL,
			ResourceNamesSubscribe: hosts(s.subscribe...), ResourceNamesUnsubscribe: hosts(s.unsubscribe...)}
		if s.ack {
			req.ResponseNonce = last.GetNonce()
		}
		for _, name := range hosts(s.holds...) {
			if req.InitialResourceVersions == nil {
				req.InitialResourceVersions = map[string]string{}
			}
			req.InitialResourceVersions[name] = versions[name]
		}
		c.send(req)
		got := c.barrier()
		what := fmt.Sprintf("step %d +%v -%v", i, s.subscribe, s.unsubscribe)
		switch {
		case s.want == nil && s.removed == nil && len(got) > 0:
			t.Fatalf("%s: unexpected response %s", what, describeDelta(got[0]))
		case s.want == nil && s.removed == nil:
		case len(got) != 1:
			t.Fatalf("%s: %d responses, want 1", what, len(got))
		default:
			checkDelta(t, what, got[0], hosts(s.want...), hosts(s.removed...))
			last = got[0]
		}
	}
}

// TestDeltaSubscribeAgain: the server must send what a client subscribes
// to even when it believes the client holds its latest version ("Subscribing
// to Resources" under Incremental xDS), unless the client itself says so.
func TestDeltaSubscribeAgain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		typeURL string
		steps   []deltaStep
	}{
		{"a held name", EndpointType, []deltaStep{
			{subscribe: []string{"a"}, want: []string{"a"}},
			{subscribe: []string{"a"}, ack: true, want: []string{"a"}},
		}},
		{"a held name beside a new one", EndpointType, []deltaStep{
			{subscribe: []string{"a"}, want: []string{"a"}},
			{subscribe: []string{"b", "a"}, ack: true, want: []string{"a", "b"}},
		}},
		{"a name the wildcard brought", ClusterType, []deltaStep{
			{want: []string{"a", "b"}},
			{subscribe: []string{"a"}, ack: true, want: []string{"a"}},
		}},
		{"the wildcard", ClusterType, []deltaStep{
			{subscribe: []string{"*"}, want: []string{"a", "b"}},
			{subscribe: []string{"*"}, ack: true, want: []string{"a", "b"}},
		}},
		{"a name that does not exist", EndpointType, []deltaStep{
			{subscribe: []string{"nope"}, removed: []string{"nope"}},
			{subscribe: []string{"nope"}, ack: true, removed: []string{"nope"}},
		}},
		{"a name dropped in between", EndpointType, []deltaStep{
			{subscribe: []string{"a"}, want: []string{"a"}},
			{unsubscribe: []string{"a"}, ack: true},
			{subscribe: []string{"a"}, want: []string{"a"}},
		}},
		// A reconnecting client that says which versions it holds is not
		// sent them again, but for load assignments, which a warming
		// cluster may wait for (TestDeltaReconnectedClusterGetsItsEndpointsAgain).
		{"held by the client's own word", ClusterType, []deltaStep{
			{subscribe: []string{"a", "b"}, holds: []string{"a"}, want: []string{"b"}},
		}},
		{"a load assignment held by the client's own word", EndpointType, []deltaStep{
			{subscribe: []string{"a", "b"}, holds: []string{"a"}, want: []string{"a", "b"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { runDeltaSteps(t, tc.typeURL, tc.steps) })
	}
}

// TestDeltaSubscriptionLists: a request's lists, in any order and with
// repeats, are merged into the subscription, which stays sorted and
// without repeats; "*" is the wildcard, never a name.
func TestDeltaSubscriptionLists(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		had                    []string
		subscribe, unsubscribe []string
		want, wantAdded        []string
		wildcard               bool
	}{
		{name: "unsorted, with repeats", subscribe: []string{"c", "a", "c", "b"},
			want: []string{"a", "b", "c"}, wantAdded: []string{"a", "b", "c"}},
		{name: "into what it had", had: []string{"b", "d"}, subscribe: []string{"e", "a", "d"},
			want: []string{"a", "b", "d", "e"}, wantAdded: []string{"a", "d", "e"}},
		{name: "dropped, and one it never had", had: []string{"a", "b", "c"}, unsubscribe: []string{"c", "x", "a"},
			want: []string{"b"}},
		{name: "added and dropped at once", had: []string{"a"}, subscribe: []string{"b"}, unsubscribe: []string{"b", "a"},
			wantAdded: []string{"b"}},
		{name: "the wildcard beside names", subscribe: []string{"b", "*", "a"},
			want: []string{"a", "b"}, wantAdded: []string{"a", "b"}, wildcard: true},
		{name: "the wildcard dropped", had: []string{"a"}, subscribe: []string{"*"}, unsubscribe: []string{"*"},
			want: []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &deltaStream{connection: &connection{s: &Server{opts: Options{MaxSubscribedNames: defaultMaxSubscribedNames}}, watches: map[string]*watch{}}}
			w := &watch{typeURL: EndpointType}
			w.setSubscription(tc.had, false)
			sub, err := c.applySubscriptions(w, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: EndpointType,
				ResourceNamesSubscribe: tc.subscribe, ResourceNamesUnsubscribe: tc.unsubscribe}, false)
			if err != nil {
				t.Fatal(err)
			}
			if got := w.resource.ResourceNames; !slices.Equal(got, tc.want) || w.resource.Wildcard != tc.wildcard {
				t.Errorf("subscription %v (wildcard %v), want %v (wildcard %v)", got, w.resource.Wildcard, tc.want, tc.wildcard)
			}
			if !slices.Equal(sub.added, tc.wantAdded) {
				t.Errorf("added %v, want %v", sub.added, tc.wantAdded)
			}
		})
	}
}

// subscribedNames is how many names proxy's stream subscribes to of
// typeURL, -1 before it asked for the type.
func subscribedNames(h *harness, proxy, typeURL string) int {
	for _, st := range h.server.SyncStatus() {
		for _, ts := range st.Types {
			if st.ProxyID == proxyID(proxy) && ts.TypeURL == typeURL {
				return ts.Subscribed
			}
		}
	}
	return -1
}

// limitNames are n names from the from-th, sorted.
func limitNames(from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("n%07d", from+i)
	}
	return out
}

// limitStep is one request of a limit test: it subscribes to names
// [from, to) of limitNames (SotW: replaces its type's names with them)
// and, in delta, drops [0, drop).
type limitStep struct {
	typeURL        string
	from, to, drop int
	exhausted      bool // the stream ends with ResourceExhausted
}

// TestSubscriptionLimit: no stream subscribes to more than
// Options.MaxSubscribedNames names over all its types; one that tries ends,
// with ResourceExhausted, and only it. A delta client could otherwise grow
// its subscription without end, 4 MiB of names at a time. The test's limit
// is small: 200,000 names a step took over a minute under the race
// detector.
func TestSubscriptionLimit(t *testing.T) {
	const limit = 2_000
	for _, tc := range []struct {
		name  string
		delta bool
		steps []limitStep
	}{
		{"delta, over requests", true, []limitStep{
			{typeURL: EndpointType, to: limit / 2},
			{typeURL: EndpointType, from: limit / 2, to: limit},
			{typeURL: EndpointType, from: limit, to: limit + 1, exhausted: true},
		}},
		{"delta, over types", true, []limitStep{
			{typeURL: EndpointType, to: limit},
			{typeURL: ClusterType, from: limit, to: limit + 1, exhausted: true},
		}},
		{"delta, names again and names dropped", true, []limitStep{
			{typeURL: EndpointType, to: limit},
			{typeURL: EndpointType, to: 1},
			{typeURL: EndpointType, from: limit, to: limit + 1, drop: 1},
		}},
		{"sotw, in one request", false, []limitStep{
			{typeURL: EndpointType, to: limit + 1, exhausted: true},
		}},
		{"sotw, a list replaced and over types", false, []limitStep{
			{typeURL: EndpointType, to: limit},
			{typeURL: EndpointType, from: 1, to: limit + 1},
			{typeURL: ClusterType, to: 1, exhausted: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{seed: seedAB, maxNames: limit})
			healthy := h.sotw("healthy")
			healthy.ack(healthy.subscribe(ClusterType))
			var send func(limitStep)
			var streamError func() error
			if tc.delta {
				c := h.delta("client")
				send = func(s limitStep) {
					c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: s.typeURL,
						ResourceNamesSubscribe: limitNames(s.from, s.to-s.from), ResourceNamesUnsubscribe: limitNames(0, s.drop)})
				}
				streamError = c.streamError
			} else {
				c := h.sotw("client")
				send = func(s limitStep) {
					c.send(&discoveryv3.DiscoveryRequest{TypeUrl: s.typeURL, ResourceNames: limitNames(s.from, s.to-s.from)})
				}
				streamError = c.streamError
			}
			subscribed := map[string]int{}
			for i, s := range tc.steps {
				send(s)
				if s.exhausted {
					if err := streamError(); status.Code(err) != codes.ResourceExhausted {
						t.Fatalf("step %d: stream ended with %v, want ResourceExhausted", i, err)
					}
					break
				}
				if tc.delta {
					subscribed[s.typeURL] = max(subscribed[s.typeURL], s.to) - s.drop
				} else {
					subscribed[s.typeURL] = s.to - s.from
				}
				want := subscribed[s.typeURL]
				h.eventually(fmt.Sprintf("step %d: %d names subscribed", i, want), func() bool {
					return subscribedNames(h, "client", s.typeURL) == want
				})
			}
			addService(h.store, "c", "10.1.0.3")
			if cds := healthy.expect(ClusterType); len(cds.GetResources()) != 3 {
				t.Fatalf("the stream beside got %d clusters, want 3", len(cds.GetResources()))
			}
		})
	}
}
