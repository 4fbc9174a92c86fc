package xds

import (
	"slices"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func seedAB(s model.Store) {
	addService(s, "a", "10.1.0.1")
	addService(s, "b", "10.1.0.2")
}

func (h *harness) syncStatus(proxy, typeURL string) TypeStatus {
	h.t.Helper()
	for _, st := range h.server.SyncStatus() {
		if st.ProxyID != proxyID(proxy) {
			continue
		}
		for _, ts := range st.Types {
			if ts.TypeURL == typeURL {
				return ts
			}
		}
	}
	h.t.Fatalf("no sync status for %s %s", proxy, shortType(typeURL))
	return TypeStatus{}
}

// sentWhole reports whether what the server records proxy's stream holds
// of typeURL is exactly one generation.
func (h *harness) sentWhole(proxy, typeURL string) bool {
	h.t.Helper()
	for _, c := range h.server.connections() {
		if c.proxy != nil && c.proxy.ID == proxyID(proxy) {
			c.mu.Lock()
			defer c.mu.Unlock()
			_, whole := c.watches[typeURL].sent.whole()
			return whole
		}
	}
	h.t.Fatalf("no connection of %s", proxy)
	return false
}

func TestSotWSubscribeAckAndSubscriptionChanges(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	c := h.sotw("client")

	cds := c.subscribe(ClusterType)
	if got, want := names(cds.GetResources(), resourceName), []string{hostname("a"), hostname("b")}; !slices.Equal(got, want) {
		t.Fatalf("wildcard CDS = %v, want %v", got, want)
	}
	c.ack(cds)
	c.expectQuiet("after the CDS ACK")
	if st := h.syncStatus("client", ClusterType); st.AckedVersion != cds.GetVersionInfo() || st.AckedNonce != cds.GetNonce() || !st.Wildcard {
		t.Fatalf("CDS sync status after ACK = %+v", st)
	}

	eds := c.subscribe(EndpointType, hostname("a"))
	if got := names(eds.GetResources(), resourceName); !slices.Equal(got, []string{hostname("a")}) {
		t.Fatalf("EDS = %v, want only a", got)
	}

	// gRPC adds a name inside the ACK of the previous response. An EDS
	// response need not repeat what the client holds (only LDS and CDS
	// responses are complete in the state of the world), so it carries b
	// alone.
	c.ack(eds, hostname("a"), hostname("b"))
	eds2 := c.expect(EndpointType)
	if got, want := names(eds2.GetResources(), resourceName), []string{hostname("b")}; !slices.Equal(got, want) {
		t.Fatalf("EDS after the subscription change = %v, want only the added %v", got, want)
	}
	if eds2.GetNonce() == eds.GetNonce() {
		t.Fatal("a new response reused the previous nonce")
	}

	// A request carrying an old nonce crossed a response and is not
	// answered. Names it adds wait for the client's answer to that
	// response; names it only drops are dropped at once (Envoy, watching
	// nothing more of a type, takes an empty response of it in silence).
	c.ack(eds, hostname("a"), hostname("b"), hostname("c"))
	c.expectQuiet("after a stale request that adds a name")
	if st := h.syncStatus("client", EndpointType); st.Subscribed != 2 || st.SentNonce != eds2.GetNonce() {
		t.Fatalf("a stale request that adds a name changed the EDS state: %+v", st)
	}
	c.ack(eds, hostname("b"))
	c.expectQuiet("after a stale request that drops a name")
	if st := h.syncStatus("client", EndpointType); st.Subscribed != 1 || st.SentNonce != eds2.GetNonce() {
		t.Fatalf("a stale request that drops a name: EDS state %+v, want 1 name subscribed and no response", st)
	}

	// Only the first request carried the node; the stream still works and
	// is known by its proxy ID.
	c.ack(eds2, hostname("b"))
	c.expectQuiet("after the EDS ACK")
	if st := h.syncStatus("client", EndpointType); st.AckedNonce != eds2.GetNonce() {
		t.Fatalf("EDS ACK not recorded: %+v", st)
	}

	// A config change reaches the client as a full-state CDS response.
	addService(h.store, "c", "10.1.0.3")
	cds2 := c.expect(ClusterType)
	if got, want := names(cds2.GetResources(), resourceName), []string{hostname("a"), hostname("b"), hostname("c")}; !slices.Equal(got, want) {
		t.Fatalf("CDS after adding c = %v, want %v", got, want)
	}
}

// TestSotWStaleUnsubscribeStopsPushes: Envoy drops its last EDS name in a
// request that crosses a push, then takes that push in silence (it watches
// nothing of the type any more) and never asks again. The server must not
// go on pushing the type, nor await an answer that never comes.
func TestSotWStaleUnsubscribeStopsPushes(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	c := h.sotw("client")
	eds := c.subscribe(EndpointType, hostname("a"))
	c.ack(eds, hostname("a"))
	c.expectQuiet("after the EDS ACK")

	setEndpoints(h.store, "a", "10.1.0.9")
	eds2 := c.expect(EndpointType)
	c.ack(eds) // crossed eds2: stale, and watches nothing
	c.expectQuiet("after the stale unsubscription")
	if st := h.syncStatus("client", EndpointType); st.Subscribed != 0 || st.SentNonce != eds2.GetNonce() {
		t.Fatalf("EDS state after a stale request that drops every name: %+v, want nothing subscribed", st)
	}
	setEndpoints(h.store, "a", "10.1.0.10")
	c.expectQuiet("after an endpoint change of a type the client no longer watches")
}

func nack(c *sotwClient, r *discoveryv3.DiscoveryResponse, acceptedVersion, msg string, resourceNames ...string) {
	c.h.t.Helper()
	c.send(&discoveryv3.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: acceptedVersion,
		ResponseNonce: r.GetNonce(), ResourceNames: resourceNames, ErrorDetail: &status.Status{Code: 3, Message: msg}})
}

func TestSotWNackIsRecordedAndNotResent(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	c := h.sotw("client")

	cds := c.subscribe(ClusterType)
	nack(c, cds, "", "cluster a: bad load balancer")
	c.expectQuiet("after a NACK")

	st := h.syncStatus("client", ClusterType)
	if st.Nack == nil || st.Nack.Error != "cluster a: bad load balancer" || st.Nack.Nonce != cds.GetNonce() {
		t.Fatalf("NACK not in sync status: %+v", st)
	}
	if st.AckedVersion != "" {
		t.Fatalf("a NACKed response counted as ACKed: %+v", st)
	}
	if got := h.counter(h.server.metrics.nacks, "cds"); got != 1 {
		t.Fatalf("meshpilot_xds_nacks_total{type=cds} = %v, want 1", got)
	}

	// An unrelated push regenerates identical clusters: nothing is resent.
	before := h.gens.count(proxyID("client"), ClusterType)
	h.server.ConfigUpdate(&model.PushRequest{Full: true})
	h.eventually("CDS regeneration", func() bool { return h.gens.count(proxyID("client"), ClusterType) > before })
	c.expectQuiet("after a push with the rejected content")

	// A real change is sent, and its ACK clears the NACK's hold.
	addService(h.store, "c", "10.1.0.3")
	cds2 := c.expect(ClusterType)
	if len(cds2.GetResources()) != 3 {
		t.Fatalf("CDS after the change has %d clusters, want 3", len(cds2.GetResources()))
	}
	c.ack(cds2)
	c.expectQuiet("after the ACK")
	if st := h.syncStatus("client", ClusterType); st.AckedVersion != cds2.GetVersionInfo() {
		t.Fatalf("ACK after NACK not recorded: %+v", st)
	}
}

// A subscription change that yields the same content as a rejected response
// must not resend it: only different content is sent.
func TestSotWNackWithholdsIdenticalResponseOnSubscriptionChange(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	c := h.sotw("client")

	eds := c.subscribe(EndpointType, hostname("a"))
	nack(c, eds, "", "no locality", hostname("a"))
	c.expectQuiet("after a NACK")

	// Subscribing to a name that does not exist leaves the content unchanged.
	// After a NACK, gRPC sends the rejected nonce with the last accepted
	// version (none yet).
	c.send(&discoveryv3.DiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: eds.GetNonce(),
		ResourceNames: []string{hostname("a"), hostname("missing")}})
	c.expectQuiet("after a subscription change with the rejected content")
	if st := h.syncStatus("client", EndpointType); st.Subscribed != 2 {
		t.Fatalf("subscription change not applied: %+v", st)
	}

	// New endpoints make new content, which is sent.
	setEndpoints(h.store, "a", "10.1.0.9")
	eds2 := c.expect(EndpointType)
	if got := names(eds2.GetResources(), resourceName); !slices.Equal(got, []string{hostname("a")}) {
		t.Fatalf("EDS after endpoint change = %v", got)
	}
}

func TestSotWEndpointOnlyChangePushesOnlyEDS(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	c := h.sotw("client")
	id := proxyID("client")

	c.ack(c.subscribe(ClusterType))
	c.ack(c.subscribe(ListenerType))
	eds := c.subscribe(EndpointType, hostname("a"), hostname("b"))
	c.ack(eds, hostname("a"), hostname("b"))
	c.expectQuiet("after the initial subscriptions")

	cdsCalls, ldsCalls := h.gens.count(id, ClusterType), h.gens.count(id, ListenerType)
	cdsPushes, ldsPushes := h.counter(h.server.metrics.pushes, "cds"), h.counter(h.server.metrics.pushes, "lds")

	setEndpoints(h.store, "a", "10.1.0.1", "10.1.0.11")
	eds2 := c.expect(EndpointType)
	if got := names(eds2.GetResources(), resourceName); !slices.Equal(got, []string{hostname("a")}) {
		t.Fatalf("incremental EDS = %v, want only the changed cluster a", got)
	}
	c.expectQuiet("after the incremental EDS push")

	if h.gens.count(id, ClusterType) != cdsCalls || h.gens.count(id, ListenerType) != ldsCalls {
		t.Fatal("an endpoint-only change regenerated CDS or LDS")
	}
	if h.counter(h.server.metrics.pushes, "cds") != cdsPushes || h.counter(h.server.metrics.pushes, "lds") != ldsPushes {
		t.Fatal("an endpoint-only change sent CDS or LDS")
	}
	reqs := h.gens.requests(id, EndpointType)
	if last := reqs[len(reqs)-1]; last.Full {
		t.Fatalf("EDS generated from a full request %+v, want an endpoint-only one", last)
	}
	// The partial response did not make the server forget cluster b.
	if st := h.syncStatus("client", EndpointType); st.Resources != 2 {
		t.Fatalf("EDS resources held after a partial push = %d, want 2", st.Resources)
	}
}

// TestSotWFullPushSendsOnlyChangedEDS: in the state of the world only LDS
// and CDS responses are complete, so a full push's EDS response carries
// only what changed, and none follows the CDS response that removes a
// cluster. Sent whole, a service churning its ports made every sidecar
// get all its load assignments and its route configuration again.
func TestSotWFullPushSendsOnlyChangedEDS(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	c := h.sotw("client")
	c.ack(c.subscribe(ClusterType))
	eds := c.subscribe(EndpointType, hostname("a"), hostname("b"))
	c.ack(eds, hostname("a"), hostname("b"))
	c.expectQuiet("after the initial subscriptions")

	// The Service write makes the push a full one.
	addService(h.store, "a", "10.1.0.1", "10.1.0.21")
	eds = c.expect(EndpointType)
	if got := names(eds.GetResources(), resourceName); !slices.Equal(got, []string{hostname("a")}) {
		t.Fatalf("EDS of a full push = %v, want only the changed a", got)
	}
	c.ack(eds, hostname("a"), hostname("b"))
	c.expectQuiet("after the EDS ACK")
	// Holding all of the push's generation, the stream refers to it
	// rather than keeping a, changed, on its own.
	if !h.sentWhole("client", EndpointType) {
		t.Error("after a full push the EDS sent set is not one generation")
	}
	edsPushes := h.counter(h.server.metrics.pushes, "eds")

	h.store.DeleteService(serviceKey("b"))
	cds := c.expect(ClusterType)
	if got, want := names(cds.GetResources(), resourceName), []string{hostname("a")}; !slices.Equal(got, want) {
		t.Fatalf("CDS after removing b = %v, want %v", got, want)
	}
	c.expectQuiet("after the CDS response that removed b")
	// Envoy drops b's load assignment with the cluster, and its name from
	// the subscription: nothing is left to send.
	c.ack(cds)
	c.ack(eds, hostname("a"))
	c.expectQuiet("after the EDS subscription lost b")
	if got := h.counter(h.server.metrics.pushes, "eds"); got != edsPushes {
		t.Fatalf("EDS responses sent for the removal: %v", got-edsPushes)
	}
	if st := h.syncStatus("client", EndpointType); st.Resources != 1 {
		t.Fatalf("EDS resources held = %d, want 1 (a)", st.Resources)
	}
}

func TestStreamsWaitForTheFirstPushContext(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB, manualStart: true})
	if h.server.Ready() {
		t.Fatal("ready before Start")
	}
	c := h.sotw("early")
	c.send(&discoveryv3.DiscoveryRequest{TypeUrl: ClusterType})
	h.start()
	cds := c.expect(ClusterType)
	if len(cds.GetResources()) != 2 {
		t.Fatalf("early subscriber got %d clusters, want 2", len(cds.GetResources()))
	}
	if !h.server.Ready() {
		t.Fatal("not ready after the first push context")
	}
}

func TestStopEndsStreamsCleanly(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	c := h.sotw("client")
	c.subscribe(ClusterType)
	if got := h.gauge(h.server.metrics.clients, "sotw"); got != 1 {
		t.Fatalf("meshpilot_xds_clients{type=sotw} = %v, want 1", got)
	}
	h.server.Stop()
	if err := c.streamError(); err == nil || err.Error() != "EOF" {
		t.Fatalf("stream ended with %v, want a clean EOF", err)
	}
	h.eventually("the client gauge to drop", func() bool { return h.gauge(h.server.metrics.clients, "sotw") == 0 })
}

// A client that reconnects may send the nonce of its previous stream; it is
// answered as a new subscription, not ignored as stale.
func TestSotWFirstRequestWithForeignNonceIsAnswered(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	c := h.sotw("client")
	c.send(&discoveryv3.DiscoveryRequest{TypeUrl: ClusterType, VersionInfo: "old", ResponseNonce: "from-another-server"})
	if cds := c.expect(ClusterType); len(cds.GetResources()) != 2 {
		t.Fatalf("got %d clusters, want 2", len(cds.GetResources()))
	}
}

// A failing generator costs the client that type's response, not its stream.
func TestGeneratorErrorKeepsTheStream(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	c := h.sotw("client")
	c.ack(c.subscribe(ClusterType))
	c.send(&discoveryv3.DiscoveryRequest{TypeUrl: RouteType, ResourceNames: []string{"route"}})
	c.expectQuiet("after a failed generation")
	if got := h.counter(h.server.metrics.generateErrors, "rds"); got != 1 {
		t.Fatalf("generate_errors_total{rds} = %v, want 1", got)
	}
	addService(h.store, "c", "10.1.0.3")
	if cds := c.expect(ClusterType); len(cds.GetResources()) != 3 {
		t.Fatalf("got %d clusters after the failure, want 3", len(cds.GetResources()))
	}
}
