package xds

import (
	"slices"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// Types Istio's agents ask for that meshpilot does not serve.
const (
	nameTableType = "type.googleapis.com/istio.networking.nds.v1.NameTable"
	ecdsType      = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"
)

func TestUnservedTypeIsAnsweredEmptyAndKeepsTheStream(t *testing.T) {
	t.Run("sotw", func(t *testing.T) {
		h := newHarness(t, harnessConfig{seed: seedAB})
		c := h.sotw("agent")
		nds := c.subscribe(nameTableType)
		if len(nds.GetResources()) != 0 || nds.GetNonce() == "" {
			t.Fatalf("NDS answer = %d resources, nonce %q; want none, with a nonce to ACK", len(nds.GetResources()), nds.GetNonce())
		}
		c.ack(nds)
		c.expectQuiet("after the ACK of the empty answer")
		if got := c.subscribe(ClusterType); len(got.GetResources()) != 2 {
			t.Fatalf("CDS on the same stream = %d clusters, want 2", len(got.GetResources()))
		}
		if got := testutil.ToFloat64(h.server.metrics.unservedTypes); got != 2 {
			t.Fatalf("unserved type requests = %v, want 2 (the subscription and its ACK)", got)
		}
	})
	t.Run("delta", func(t *testing.T) {
		h := newHarness(t, harnessConfig{seed: seedAB})
		c := h.delta("agent")
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ecdsType, ResourceNamesSubscribe: []string{"wasm-filter"}})
		ecds := c.expect(ecdsType)
		checkDelta(t, "ECDS answer", ecds, nil, []string{"wasm-filter"})
		c.ack(ecds)
		c.expectQuiet("after the ACK of the empty answer")
		c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ClusterType})
		checkDelta(t, "CDS on the same stream", c.expect(ClusterType), []string{hostname("a"), hostname("b")}, nil)
	})
}

// panicky wraps the fake CDS generator to panic for one proxy.
func panicky(victim string) map[string]Generator {
	set := newFakeGenerators().set
	inner := set[ClusterType]
	set[ClusterType] = GeneratorFunc(func(p *model.Proxy, pc *pushcontext.PushContext, w *model.WatchedResource, req *model.PushRequest) (model.Resources, error) {
		if p.ID == proxyID(victim) {
			var missing map[string]*model.Service
			_ = missing["x"].Hostname // a nil dereference, as a real bug would make
		}
		return inner.Generate(p, pc, w, req)
	})
	return set
}

func TestGeneratorPanicFailsOnlyThatProxysPush(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB, generators: panicky("victim")})
	victim, bystander := h.sotw("victim"), h.sotw("bystander")

	victim.send(&discoveryv3.DiscoveryRequest{TypeUrl: ClusterType})
	victim.expectQuiet("after a CDS request whose generation panicked")
	if got := h.counter(h.server.metrics.generatorPanics, "cds"); got != 1 {
		t.Fatalf("generator panics{cds} = %v, want 1", got)
	}
	// The victim's stream serves its other types, and everyone else.
	if eds := victim.subscribe(EndpointType, hostname("a")); len(eds.GetResources()) != 1 {
		t.Fatalf("victim's EDS = %d resources, want 1", len(eds.GetResources()))
	}
	cds := bystander.subscribe(ClusterType)
	if got := names(cds.GetResources(), resourceName); !slices.Equal(got, []string{hostname("a"), hostname("b")}) {
		t.Fatalf("bystander's CDS = %v", got)
	}
}
