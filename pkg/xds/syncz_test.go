package xds

import (
	"slices"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// clientConfigs decodes a syncz answer, in the order it was sent.
func clientConfigs(t *testing.T, r *discoveryv3.DiscoveryResponse) []*statusv3.ClientConfig {
	t.Helper()
	var out []*statusv3.ClientConfig
	for _, a := range r.GetResources() {
		cfg := &statusv3.ClientConfig{}
		if err := a.UnmarshalTo(cfg); err != nil {
			t.Fatalf("syncz resource %s: %v", a.GetTypeUrl(), err)
		}
		out = append(out, cfg)
	}
	return out
}

// statusOf is each type's status, but for the probes of expectQuiet: the
// last is recorded by the server only after the client has it, so its
// status may be either.
func statusOf(cfg *statusv3.ClientConfig) map[string]statusv3.ConfigStatus {
	out := map[string]statusv3.ConfigStatus{}
	for _, x := range cfg.GetGenericXdsConfigs() {
		if x.GetTypeUrl() != probeType {
			out[x.GetTypeUrl()] = x.GetConfigStatus()
		}
	}
	return out
}

// TestSynczOverXDS asks for istio.io/debug/syncz as istioctl proxy-status
// does (SotW, no names) and checks the CSDS answer: every proxy connection,
// two of them with one node ID, each type's status as istiod reports it,
// and no entry for the asking tool itself.
func TestSynczOverXDS(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	h.gens.set[DebugSyncType] = h.server.SyncGenerator("istio-system")

	// The same proxy twice, as when a restarted pod's old stream lingers:
	// both ACK their clusters; after a change, the first ACKs the new
	// clusters and the second has not answered yet.
	first := h.sotw("client")
	first.ack(first.subscribe(ClusterType))
	// The route generator of the fakes always fails, so nothing is sent.
	first.send(&discoveryv3.DiscoveryRequest{TypeUrl: RouteType, ResourceNames: []string{"r"}})
	first.expectQuiet("after subscribing")
	second := h.sotw("client")
	second.ack(second.subscribe(ClusterType))
	second.expectQuiet("after subscribing")
	addService(h.store, "c", "10.1.0.3")
	first.ack(first.expect(ClusterType))
	first.expectQuiet("after the change")
	second.expect(ClusterType)
	// The server records a send after making it; its next request handled
	// (the probe) shows the record is done.
	second.expectQuiet("after the push")
	// Another proxy rejected its endpoints.
	other := h.sotw("other")
	eds := other.subscribe(EndpointType, hostname("a"))
	nack(other, eds, "", "bad endpoints", hostname("a"))
	other.expectQuiet("after a NACK")

	tool := h.sotwAs("istioctl", nodeIn("istioctl", "istio-system", nil))
	r := tool.subscribe(DebugSyncType)
	got := clientConfigs(t, r)
	var ids []string
	for _, cfg := range got {
		ids = append(ids, cfg.GetNode().GetId())
	}
	if want := []string{proxyID("client"), proxyID("client"), proxyID("other")}; !slices.Equal(ids, want) {
		t.Fatalf("syncz lists %v, want %v (both connections of client, and not the tool)", ids, want)
	}
	if ns := got[0].GetNode().GetMetadata().GetFields()["NAMESPACE"].GetStringValue(); ns != "default" {
		t.Errorf("node metadata NAMESPACE = %q, want default", ns)
	}
	want := []map[string]statusv3.ConfigStatus{
		{ClusterType: statusv3.ConfigStatus_SYNCED, RouteType: statusv3.ConfigStatus_NOT_SENT},
		{ClusterType: statusv3.ConfigStatus_STALE},
		{EndpointType: statusv3.ConfigStatus_ERROR},
	}
	for i, w := range want {
		if s := statusOf(got[i]); !mapsEqual(s, w) {
			t.Errorf("entry %d (%s): status %v, want %v", i, ids[i], s, w)
		}
	}
	for _, x := range got[2].GetGenericXdsConfigs() {
		if x.GetTypeUrl() == EndpointType && (x.GetErrorState().GetDetails() != "bad endpoints" || x.GetLastUpdated() == nil) {
			t.Errorf("the NACK is not reported: %v", x)
		}
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// TestSynczCallerNamespace: a caller that proved an identity outside the
// system namespace sees only its own namespace's proxies; the system
// namespace and plaintext callers see all, as istiod does.
func TestSynczCallerNamespace(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	for _, p := range []struct{ name, ns string }{{"web", "default"}, {"pay", "payments"}} {
		c := h.sotwAs(p.name, nodeIn(p.name, p.ns, nil))
		c.ack(c.subscribe(ClusterType))
		c.expectQuiet("after subscribing")
	}
	gen := h.server.SyncGenerator("istio-system")
	cases := []struct {
		name   string
		caller *model.Identity
		want   []string
	}{
		{"plaintext", nil, []string{"web", "pay"}},
		{"system namespace", &model.Identity{TrustDomain: "cluster.local", Namespace: "istio-system", ServiceAccount: "default"}, []string{"web", "pay"}},
		{"payments", &model.Identity{TrustDomain: "cluster.local", Namespace: "payments", ServiceAccount: "default"}, []string{"pay"}},
		{"a namespace without proxies", &model.Identity{TrustDomain: "cluster.local", Namespace: "empty", ServiceAccount: "default"}, nil},
	}
	ids := map[string]string{
		"web": "sidecar~10.0.0.1~web.default~default.svc.cluster.local",
		"pay": "sidecar~10.0.0.1~pay.payments~payments.svc.cluster.local",
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := gen.Generate(&model.Proxy{ID: "tool", VerifiedIdentity: tc.caller}, nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range res {
				cfg := &statusv3.ClientConfig{}
				if err := r.Resource.UnmarshalTo(cfg); err != nil {
					t.Fatal(err)
				}
				got = append(got, cfg.GetNode().GetId())
			}
			var want []string
			for _, n := range tc.want {
				want = append(want, ids[n])
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("syncz for %v lists %v, want %v", tc.caller, got, want)
			}
		})
	}
}
