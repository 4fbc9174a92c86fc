package xds

import (
	"slices"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
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
