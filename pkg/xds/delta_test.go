package xds

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"

	"github.com/meshpilot/meshpilot/pkg/model"
)

type deltaClient struct {
	h         *harness
	name      string
	stream    grpc.BidiStreamingClient[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]
	responses chan *discoveryv3.DeltaDiscoveryResponse
	errs      chan error
	sentNode  bool
	probes    int
}

func (h *harness) delta(name string) *deltaClient {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	stream, err := h.client.DeltaAggregatedResources(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	c := &deltaClient{h: h, name: name, stream: stream}
	c.responses, c.errs = receive(stream.Recv)
	return c
}

func (c *deltaClient) send(req *discoveryv3.DeltaDiscoveryRequest) {
	c.h.t.Helper()
	if !c.sentNode {
		req.Node = nodeFor(c.name)
		c.sentNode = true
	}
	if err := c.stream.Send(req); err != nil {
		c.h.t.Fatalf("send: %v", err)
	}
}

func (c *deltaClient) expect(typeURL string) *discoveryv3.DeltaDiscoveryResponse {
	c.h.t.Helper()
	select {
	case r := <-c.responses:
		if r.GetTypeUrl() != typeURL {
			c.h.t.Fatalf("got a %s response %s, want %s", shortType(r.GetTypeUrl()), describeDelta(r), shortType(typeURL))
		}
		return r
	case err := <-c.errs:
		c.h.t.Fatalf("stream ended: %v", err)
	case <-time.After(waitLimit):
		c.h.t.Fatal("no response")
	}
	return nil
}

func (c *deltaClient) ack(r *discoveryv3.DeltaDiscoveryResponse) {
	c.h.t.Helper()
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
}

// barrier: see sotwClient.barrier.
func (c *deltaClient) barrier() []*discoveryv3.DeltaDiscoveryResponse {
	c.h.t.Helper()
	c.probes++
	probe := fmt.Sprintf("probe-%d", c.probes)
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: probeType, ResourceNamesSubscribe: []string{probe}})
	var others []*discoveryv3.DeltaDiscoveryResponse
	for {
		r := c.expectAny()
		if r.GetTypeUrl() == probeType && slices.Contains(deltaNames(r), probe) {
			return others
		}
		others = append(others, r)
	}
}

func (c *deltaClient) expectAny() *discoveryv3.DeltaDiscoveryResponse {
	c.h.t.Helper()
	select {
	case r := <-c.responses:
		return r
	case err := <-c.errs:
		c.h.t.Fatalf("stream ended: %v", err)
	case <-time.After(waitLimit):
		c.h.t.Fatal("no response")
	}
	return nil
}

func (c *deltaClient) expectQuiet(what string) {
	c.h.t.Helper()
	if others := c.barrier(); len(others) > 0 {
		var got []string
		for _, r := range others {
			got = append(got, shortType(r.GetTypeUrl())+describeDelta(r))
		}
		c.h.t.Fatalf("%s: unexpected responses %v", what, got)
	}
}

// deltaVersions maps the name of each resource of r to its version, as a
// client that holds them reports them in initial_resource_versions.
func deltaVersions(r *discoveryv3.DeltaDiscoveryResponse) map[string]string {
	out := map[string]string{}
	for _, res := range r.GetResources() {
		out[res.GetName()] = res.GetVersion()
	}
	return out
}

func deltaNames(r *discoveryv3.DeltaDiscoveryResponse) []string {
	var out []string
	for _, res := range r.GetResources() {
		out = append(out, res.GetName())
	}
	slices.Sort(out)
	return out
}

func describeDelta(r *discoveryv3.DeltaDiscoveryResponse) string {
	return fmt.Sprintf("{resources %v removed %v}", deltaNames(r), r.GetRemovedResources())
}

func checkDelta(t *testing.T, what string, r *discoveryv3.DeltaDiscoveryResponse, resources, removed []string) {
	t.Helper()
	if got := deltaNames(r); !slices.Equal(got, resources) {
		t.Fatalf("%s: resources %v, want %v", what, got, resources)
	}
	if got := r.GetRemovedResources(); !slices.Equal(got, removed) {
		t.Fatalf("%s: removed %v, want %v", what, got, removed)
	}
	for _, res := range r.GetResources() {
		if res.GetVersion() == "" || res.GetResource() == nil || resourceName(res.GetResource()) != res.GetName() {
			t.Fatalf("%s: malformed resource %v", what, res)
		}
	}
}

func TestDeltaSubscriptionsUpdatesAndRemovals(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	c := h.delta("client")
	a, b, cc := hostname("a"), hostname("b"), hostname("c")

	// A first CDS request without names is a wildcard subscription.
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	cds := c.expect(ClusterType)
	checkDelta(t, "wildcard CDS", cds, []string{a, b}, nil)
	c.ack(cds)

	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{a}})
	eds := c.expect(EndpointType)
	checkDelta(t, "EDS subscribe a", eds, []string{a}, nil)
	c.ack(eds)
	c.expectQuiet("after the ACKs")
	if st := h.syncStatus("client", ClusterType); st.AckedNonce != cds.GetNonce() || !st.Wildcard {
		t.Fatalf("CDS sync status = %+v", st)
	}

	// An endpoint change of an unsubscribed cluster sends nothing.
	setEndpoints(h.store, "b", "10.1.0.22")
	h.eventually("EDS regeneration", func() bool {
		reqs := h.gens.requests(proxyID("client"), EndpointType)
		return len(reqs) > 0 && !reqs[len(reqs)-1].Full
	})
	c.expectQuiet("after an endpoint change of an unsubscribed cluster")

	setEndpoints(h.store, "a", "10.1.0.11")
	eds = c.expect(EndpointType)
	checkDelta(t, "EDS after a's endpoints changed", eds, []string{a}, nil)
	c.ack(eds)

	// A new service: only the new cluster is sent.
	addService(h.store, "c", "10.1.0.3")
	cds = c.expect(ClusterType)
	checkDelta(t, "CDS after adding c", cds, []string{cc}, nil)
	c.ack(cds)

	// A deleted service is listed as removed.
	h.store.DeleteService(serviceKey("b"))
	cds = c.expect(ClusterType)
	checkDelta(t, "CDS after deleting b", cds, nil, []string{b})
	c.ack(cds)
	c.expectQuiet("after the removal")

	// Subscribing to a name that does not exist answers with its removal.
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{cc, hostname("nope")}})
	eds = c.expect(EndpointType)
	checkDelta(t, "EDS subscribe c and nope", eds, []string{cc}, []string{hostname("nope")})
	c.ack(eds)

	// A partial (endpoint-only) result never implies removals: a is kept.
	setEndpoints(h.store, "c", "10.1.0.31")
	eds = c.expect(EndpointType)
	checkDelta(t, "EDS after c's endpoints changed", eds, []string{cc}, nil)
	c.ack(eds)

	// After unsubscribing, changes to a are no longer sent.
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesUnsubscribe: []string{a}})
	c.expectQuiet("after unsubscribing")
	setEndpoints(h.store, "a", "10.1.0.12")
	setEndpoints(h.store, "c", "10.1.0.33")
	eds = c.expect(EndpointType)
	checkDelta(t, "EDS after unsubscribing a", eds, []string{cc}, nil)
	if st := h.syncStatus("client", EndpointType); st.Subscribed != 2 || st.Resources != 1 {
		t.Fatalf("EDS state after unsubscribe = %+v", st)
	}
}

// TestDeltaUnsubscribeCrossingAResponse: an unsubscription can cross a
// response that carries the name. A client that stores what it receives
// whether it still asks for it or not would then hold a copy that the
// server no longer counts, and that no later push removes; so the server
// answers such an unsubscription with the name's removal. Once the client
// has answered the last response, nothing can be on its way, and an
// unsubscription needs no answer.
func TestDeltaUnsubscribeCrossingAResponse(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	c := h.delta("client")
	a, b := hostname("a"), hostname("b")

	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{a, b}})
	eds := c.expect(EndpointType)
	checkDelta(t, "EDS subscribe a and b", eds, []string{a, b}, nil)
	c.ack(eds)

	setEndpoints(h.store, "a", "10.1.0.11")
	checkDelta(t, "EDS after a's endpoints changed", c.expect(EndpointType), []string{a}, nil)
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesUnsubscribe: []string{a}})
	eds = c.expect(EndpointType)
	checkDelta(t, "EDS answer to unsubscribing a before the ACK", eds, nil, []string{a})
	c.ack(eds)
	c.expectQuiet("after the ACK of a's removal")

	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesUnsubscribe: []string{b}})
	c.expectQuiet("after unsubscribing b with nothing unanswered")
	if st := h.syncStatus("client", EndpointType); st.Subscribed != 0 || st.Resources != 0 {
		t.Fatalf("EDS state after both unsubscriptions = %+v, want nothing subscribed or held", st)
	}
}

func TestDeltaNackIsRecordedAndNotResent(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	c := h.delta("client")

	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	cds := c.expect(ClusterType)
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResponseNonce: cds.GetNonce(),
		ErrorDetail: &status.Status{Code: 3, Message: "rejected"}})
	c.expectQuiet("after a NACK")
	st := h.syncStatus("client", ClusterType)
	if st.Nack == nil || st.Nack.Error != "rejected" || st.AckedNonce != "" {
		t.Fatalf("NACK not recorded: %+v", st)
	}
	if got := h.counter(h.server.metrics.nacks, "cds"); got != 1 {
		t.Fatalf("nacks_total{cds} = %v, want 1", got)
	}

	before := h.gens.count(proxyID("client"), ClusterType)
	h.server.ConfigUpdate(&model.PushRequest{Full: true})
	h.eventually("CDS regeneration", func() bool { return h.gens.count(proxyID("client"), ClusterType) > before })
	c.expectQuiet("after a push with the rejected content")

	addService(h.store, "c", "10.1.0.3")
	checkDelta(t, "CDS after a change", c.expect(ClusterType), []string{hostname("c")}, nil)
}

// A reconnecting delta client announces what it holds; unchanged resources
// are not sent again, and ones that no longer exist are removed.
func TestDeltaInitialResourceVersions(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	first := h.delta("first")
	first.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	versions := deltaVersions(first.expect(ClusterType))
	versions[hostname("gone")] = "0123456789abcdef"
	versions[hostname("b")] = "stale"

	again := h.delta("again")
	again.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ClusterType, InitialResourceVersions: versions})
	checkDelta(t, "CDS after reconnecting", again.expect(ClusterType), []string{hostname("b")}, []string{hostname("gone")})
}
