package xds

import (
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
	"github.com/meshpilot/meshpilot/pkg/workloadapi"
	"github.com/meshpilot/meshpilot/pkg/xds/wdsgen"
)

const ztunnelID = "ztunnel~10.0.9.1~ztunnel-abcde.istio-system~istio-system.svc.cluster.local"

var ztunnelNode = &corev3.Node{Id: ztunnelID}

// wdsHarness serves the real WDS generators, plus the probe type that
// expectQuiet's barrier needs.
func wdsHarness(t *testing.T) *harness {
	gens := map[string]Generator{}
	for typeURL, g := range wdsgen.New(wdsgen.Options{}).ByTypeURL() {
		gens[typeURL] = g
	}
	gens[probeType] = GeneratorFunc(func(p *model.Proxy, pc *pushcontext.PushContext, w *model.WatchedResource, r *model.PushRequest) (model.Resources, error) {
		return genProbe(p, pc, w, r), nil
	})
	return newHarness(t, harnessConfig{generators: gens, seed: seedMesh})
}

const echoHost = "echo.amb.svc.cluster.local"

func echoService(targetPort uint32) *model.Service {
	return &model.Service{Name: "echo", Namespace: "amb", Hostname: echoHost, ClusterIPs: []string{"10.96.0.10"},
		Selector: map[string]string{"app": "echo"},
		Ports:    []*model.Port{{Name: "http", Port: 80, Protocol: model.ProtocolHTTP, TargetPort: targetPort}}}
}

func echoPod(name, ip string, labels map[string]string) *model.Workload {
	if labels == nil {
		labels = map[string]string{"app": "echo"}
	}
	return &model.Workload{Name: name, Namespace: "amb", IPs: []string{ip}, Labels: labels, ServiceAccount: "echo",
		NodeName: "node-1", Ready: true, Redirected: true, WorkloadName: "echo", CanonicalName: "echo", CanonicalRevision: "latest"}
}

func seedMesh(s model.Store) {
	s.UpsertNamespace(&model.Namespace{Name: "amb", Labels: map[string]string{model.DataplaneModeLabel: model.DataplaneModeAmbient}})
	s.UpsertService(echoService(8080))
	s.UpsertWorkload(echoPod("echo-1", "10.0.0.1", nil))
	s.UpsertWorkload(echoPod("echo-2", "10.0.0.2", nil))
}

func uid(name string) string { return "Kubernetes//Pod/amb/" + name }

// wdsClient is a delta client with a node proxy's identity.
func (h *harness) wdsClient() *deltaClient {
	c := h.delta("ztunnel")
	c.sentNode = true // the first request carries the ztunnel node itself
	return c
}

// checkWDS asserts the exact delta: the resources sent (by name) and the
// names removed, and that each resource is the Address its name says.
func checkWDS(t *testing.T, what string, r *discoveryv3.DeltaDiscoveryResponse, resources, removed []string) map[string]*workloadapi.Address {
	t.Helper()
	if got := deltaNames(r); !slices.Equal(got, resources) {
		t.Fatalf("%s: resources %v, want %v", what, got, resources)
	}
	if got := r.GetRemovedResources(); !slices.Equal(got, removed) {
		t.Fatalf("%s: removed %v, want %v", what, got, removed)
	}
	out := map[string]*workloadapi.Address{}
	for _, res := range r.GetResources() {
		a := &workloadapi.Address{}
		if res.GetResource().GetTypeUrl() != AddressType || proto.Unmarshal(res.GetResource().GetValue(), a) != nil {
			t.Fatalf("%s: %s is not an Address", what, res.GetName())
		}
		name := a.GetWorkload().GetUid()
		if s := a.GetService(); s != nil {
			name = s.GetNamespace() + "/" + s.GetHostname()
		}
		if name != res.GetName() || res.GetVersion() == "" {
			t.Fatalf("%s: resource named %q (version %q) holds %q", what, res.GetName(), res.GetVersion(), name)
		}
		out[res.GetName()] = a
	}
	return out
}

// TestWDSPodChurnSendsExactlyTheChangedAddresses: a node proxy's wildcard
// subscription gets every Address once; after that, each change of a Pod
// sends exactly that Pod's Address (or its removal), and a Service's
// Address only when its own content changes.
func TestWDSPodChurnSendsExactlyTheChangedAddresses(t *testing.T) {
	h := wdsHarness(t)
	c := h.wdsClient()
	svc := "amb/" + echoHost

	c.send(&discoveryv3.DeltaDiscoveryRequest{Node: ztunnelNode, TypeUrl: AddressType})
	r := c.expect(AddressType)
	got := checkWDS(t, "wildcard", r, []string{uid("echo-1"), uid("echo-2"), svc}, nil)
	w := got[uid("echo-1")].GetWorkload()
	if w.GetTunnelProtocol() != workloadapi.TunnelProtocol_HBONE || w.GetServiceAccount() != "echo" ||
		w.GetTrustDomain() != "cluster.local" || w.GetServices()[svc].GetPorts()[0].GetTargetPort() != 8080 {
		t.Fatalf("echo-1 = %v", w)
	}
	c.ack(r)

	// Authorization is answered, empty, and its ACK needs nothing more.
	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: AuthorizationType})
	authz := c.expect(AuthorizationType)
	if len(authz.GetResources()) != 0 || len(authz.GetRemovedResources()) != 0 {
		t.Fatalf("authorization = %s, want empty", describeDelta(authz))
	}
	c.ack(authz)
	c.expectQuiet("after the ACKs")

	runWDSSteps(t, h, c, []wdsStep{
		{
			name:   "a pod is added",
			change: func(s model.Store) { s.UpsertWorkload(echoPod("echo-3", "10.0.0.3", nil)) },
			sent:   []string{uid("echo-3")},
		},
		{
			name: "a pod stops being ready",
			change: func(s model.Store) {
				p := echoPod("echo-1", "10.0.0.1", nil)
				p.Ready = false
				s.UpsertWorkload(p)
			},
			sent: []string{uid("echo-1")},
			check: func(t *testing.T, got map[string]*workloadapi.Address) {
				if st := got[uid("echo-1")].GetWorkload().GetStatus(); st != workloadapi.WorkloadStatus_UNHEALTHY {
					t.Errorf("status %v, want UNHEALTHY", st)
				}
			},
		},
		{
			name:    "a pod is deleted",
			change:  func(s model.Store) { s.DeleteWorkload(model.NamespacedName{Namespace: "amb", Name: "echo-2"}) },
			removed: []string{uid("echo-2")},
		},
		{
			name: "a pod leaves the service: the service's Address is unchanged",
			change: func(s model.Store) {
				s.UpsertWorkload(echoPod("echo-3", "10.0.0.3", map[string]string{"app": "other"}))
			},
			sent: []string{uid("echo-3")},
			check: func(t *testing.T, got map[string]*workloadapi.Address) {
				if n := len(got[uid("echo-3")].GetWorkload().GetServices()); n != 0 {
					t.Errorf("echo-3 still lists %d services", n)
				}
			},
		},
		{
			name:   "the service's target port changes: it and the pod it selects",
			change: func(s model.Store) { s.UpsertService(echoService(9090)) },
			sent:   []string{uid("echo-1"), svc},
		},
		{
			name: "the namespace leaves ambient mode: no more tunnel to its pods",
			change: func(s model.Store) {
				s.UpsertNamespace(&model.Namespace{Name: "amb"})
			},
			sent: []string{uid("echo-1"), uid("echo-3")},
			check: func(t *testing.T, got map[string]*workloadapi.Address) {
				for name, a := range got {
					if p := a.GetWorkload().GetTunnelProtocol(); p != workloadapi.TunnelProtocol_NONE {
						t.Errorf("%s: tunnel %v, want NONE", name, p)
					}
				}
			},
		},
		{
			name:    "the service is deleted",
			change:  func(s model.Store) { s.DeleteService(model.NamespacedName{Namespace: "amb", Name: "echo"}) },
			sent:    []string{uid("echo-1")},
			removed: []string{svc},
		},
	})
}

// wdsStep is one change to the store and the delta a node proxy must get
// for it: exactly these names sent and removed (none of either: nothing at
// all), then check on what was sent.
type wdsStep struct {
	name          string
	change        func(model.Store)
	sent, removed []string
	check         func(t *testing.T, got map[string]*workloadapi.Address)
}

// runWDSSteps applies each step in order, checks the delta c receives and
// ACKs it, and expects quiet after each.
func runWDSSteps(t *testing.T, h *harness, c *deltaClient, steps []wdsStep) {
	t.Helper()
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			step.change(h.store)
			if step.sent == nil && step.removed == nil {
				c.expectQuiet("after " + step.name)
				return
			}
			r := c.expect(AddressType)
			got := checkWDS(t, step.name, r, step.sent, step.removed)
			if step.check != nil {
				step.check(t, got)
			}
			c.ack(r)
			c.expectQuiet("after " + step.name)
		})
	}
}

// TestWDSOnDemand: a node proxy that subscribes by address gets the
// workload or service there under its own name, with the address as an
// alias; a service's VIP brings the workloads behind it; an unknown
// address is answered as removed, and a deleted Pod as a removal.
func TestWDSOnDemand(t *testing.T) {
	h := wdsHarness(t)
	c := h.wdsClient()
	svc := "amb/" + echoHost

	// ztunnel's on-demand start: subscribe and unsubscribe the wildcard.
	c.send(&discoveryv3.DeltaDiscoveryRequest{Node: ztunnelNode, TypeUrl: AddressType,
		ResourceNamesSubscribe: []string{"*", "/10.0.0.1", "/10.9.9.9"}, ResourceNamesUnsubscribe: []string{"*"}})
	r := c.expect(AddressType)
	checkWDS(t, "by pod address", r, []string{uid("echo-1")}, []string{"/10.9.9.9"})
	if a := r.GetResources()[0].GetAliases(); !slices.Equal(a, []string{"/10.0.0.1"}) {
		t.Fatalf("aliases %v, want the subscribed address", a)
	}
	c.ack(r)

	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: AddressType, ResourceNamesSubscribe: []string{"/10.96.0.10"}})
	r = c.expect(AddressType)
	// echo-1 is held already, unchanged: only what is new is sent.
	checkWDS(t, "by service VIP", r, []string{uid("echo-2"), svc}, nil)
	c.ack(r)
	c.expectQuiet("after the on-demand subscriptions")

	// A Pod of no subscribed address changes: nothing is sent.
	h.store.UpsertWorkload(&model.Workload{Name: "elsewhere", Namespace: "amb", IPs: []string{"10.0.0.50"}})
	c.expectQuiet("after an unsubscribed pod appeared")

	h.store.DeleteWorkload(model.NamespacedName{Namespace: "amb", Name: "echo-1"})
	r = c.expect(AddressType)
	checkWDS(t, "after deleting echo-1", r, nil, []string{uid("echo-1")})
	c.ack(r)
}

// TestWDSOnDemandUnsubscribe: a node proxy that unsubscribes an address
// is told at once to remove what only that address brought: the service
// at a VIP and the Pods behind it, held under their own names, which it
// never unsubscribed. What another subscribed name still brings stays, and
// once nothing is subscribed nothing is held, deleted Pods included.
func TestWDSOnDemandUnsubscribe(t *testing.T) {
	h := wdsHarness(t)
	c := h.wdsClient()
	svc := "amb/" + echoHost

	c.send(&discoveryv3.DeltaDiscoveryRequest{Node: ztunnelNode, TypeUrl: AddressType,
		ResourceNamesSubscribe: []string{"*", "/10.0.0.1", "/10.96.0.10"}, ResourceNamesUnsubscribe: []string{"*"}})
	r := c.expect(AddressType)
	checkWDS(t, "by pod address and VIP", r, []string{uid("echo-1"), uid("echo-2"), svc}, nil)
	c.ack(r)
	c.expectQuiet("after the ACK")

	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: AddressType, ResourceNamesUnsubscribe: []string{"/10.96.0.10"}})
	r = c.expect(AddressType)
	checkWDS(t, "after unsubscribing the VIP", r, nil, []string{uid("echo-2"), svc})
	c.ack(r)
	c.expectQuiet("after the ACK")

	c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: AddressType, ResourceNamesUnsubscribe: []string{"/10.0.0.1"}})
	r = c.expect(AddressType)
	checkWDS(t, "after unsubscribing the last address", r, nil, []string{uid("echo-1")})
	c.ack(r)
	c.expectQuiet("after the ACK")

	// Nothing is held, so a deleted Pod has nothing to remove.
	h.store.DeleteWorkload(model.NamespacedName{Namespace: "amb", Name: "echo-1"})
	h.eventually("echo-1 to go", func() bool { return h.server.PushContext().WorkloadByUID(uid("echo-1")) == nil })
	c.expectQuiet("after deleting echo-1")
}

// TestWDSOverSotWIsRefused: WDS is delta-only; a SotW subscription ends
// the stream with a reason, rather than an empty answer that would tell
// the client no workload exists.
func TestWDSOverSotWIsRefused(t *testing.T) {
	h := wdsHarness(t)
	c := h.sotwAs("ztunnel", ztunnelNode)
	c.send(&discoveryv3.DiscoveryRequest{TypeUrl: AddressType})
	err := c.streamError()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "delta ADS only") {
		t.Fatalf("stream error %v, want InvalidArgument saying delta ADS only", err)
	}
}
