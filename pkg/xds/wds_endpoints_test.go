package xds

import (
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/workloadapi"
)

// TestWDSEndpointWorkloads: a selector-less Service's endpoints, which name
// no Pod, reach node proxies as workloads of their own (as istiod's ambient
// index sends them), and follow each endpoint change, which takes the
// endpoint fast path; endpoints that name a Pod add nothing, the Pod is
// the workload.
func TestWDSEndpointWorkloads(t *testing.T) {
	h := wdsHarness(t)
	dbName := model.NamespacedName{Namespace: "amb", Name: "db"}
	dbKey := "amb/db.amb.svc.cluster.local"
	h.store.UpsertService(&model.Service{Name: "db", Namespace: "amb", Hostname: "db.amb.svc.cluster.local",
		ClusterIPs: []string{"10.96.0.20"}, Ports: []*model.Port{{Name: "tcp", Port: 5432, Protocol: model.ProtocolTCP, TargetPort: 5432}}})
	h.waitForService(dbName)
	endpoint := func(ip string, health model.HealthStatus) *model.Endpoint {
		return &model.Endpoint{Address: ip, Port: 15432, ServicePortName: "tcp", Namespace: "amb", Health: health}
	}
	sliceUID := func(ip string) string { return "Kubernetes/discovery.k8s.io/EndpointSlice/amb/db/" + ip }

	c := h.wdsClient()
	c.send(&discoveryv3.DeltaDiscoveryRequest{Node: ztunnelNode, TypeUrl: AddressType})
	r := c.expect(AddressType)
	checkWDS(t, "wildcard", r, []string{uid("echo-1"), uid("echo-2"), dbKey, "amb/" + echoHost}, nil)
	c.ack(r)
	c.expectQuiet("after the ACK")

	runWDSSteps(t, h, c, []wdsStep{
		{
			name: "an endpoint without a Pod",
			change: func(s model.Store) {
				s.SetEndpoints(dbName, "db-manual", []*model.Endpoint{endpoint("192.168.1.10", model.Healthy)})
			},
			sent: []string{sliceUID("192.168.1.10")},
			check: func(t *testing.T, got map[string]*workloadapi.Address) {
				w := got[sliceUID("192.168.1.10")].GetWorkload()
				ports := w.GetServices()[dbKey].GetPorts()
				if len(ports) != 1 || ports[0].GetServicePort() != 5432 || ports[0].GetTargetPort() != 15432 {
					t.Errorf("ports %v, want 5432 → 15432", ports)
				}
				if w.GetNetworkMode() != workloadapi.NetworkMode_HOST_NETWORK || w.GetTunnelProtocol() != workloadapi.TunnelProtocol_NONE ||
					w.GetServiceAccount() != "" || w.GetStatus() != workloadapi.WorkloadStatus_HEALTHY {
					t.Errorf("workload %v: want a shared address, no tunnel, no identity, healthy", w)
				}
			},
		},
		{
			name: "it stops being ready",
			change: func(s model.Store) {
				s.SetEndpoints(dbName, "db-manual", []*model.Endpoint{endpoint("192.168.1.10", model.Unhealthy)})
			},
			sent: []string{sliceUID("192.168.1.10")},
			check: func(t *testing.T, got map[string]*workloadapi.Address) {
				if st := got[sliceUID("192.168.1.10")].GetWorkload().GetStatus(); st != workloadapi.WorkloadStatus_UNHEALTHY {
					t.Errorf("status %v, want UNHEALTHY", st)
				}
			},
		},
		{
			name: "it is replaced by another",
			change: func(s model.Store) {
				s.SetEndpoints(dbName, "db-manual", []*model.Endpoint{endpoint("192.168.1.11", model.Healthy)})
			},
			sent:    []string{sliceUID("192.168.1.11")},
			removed: []string{sliceUID("192.168.1.10")},
		},
		{
			name: "endpoints that name Pods add nothing",
			change: func(s model.Store) {
				s.SetEndpoints(model.NamespacedName{Namespace: "amb", Name: "echo"}, "echo-abc", []*model.Endpoint{
					{Address: "10.0.0.1", Port: 8080, ServicePortName: "http", Namespace: "amb", FromPod: true},
				})
			},
		},
		{
			name:    "the service is deleted",
			change:  func(s model.Store) { s.DeleteService(dbName) },
			removed: []string{sliceUID("192.168.1.11"), dbKey},
		},
	})
}

// TestWDSSelectorlessServiceOfPods: a Service without a selector whose
// EndpointSlice names Pods (a hand-written or another controller's slice,
// or one mirrored from Endpoints with targetRefs) is backed by those Pods.
// istiod lists such a service among the Pod workload's services
// (matchingServicesWithoutSelectors in its ambient index); without it a
// node proxy has the VIP and no workload behind it.
func TestWDSSelectorlessServiceOfPods(t *testing.T) {
	h := wdsHarness(t)
	extKey := "amb/ext.amb.svc.cluster.local"
	h.store.UpsertService(&model.Service{Name: "ext", Namespace: "amb", Hostname: "ext.amb.svc.cluster.local",
		ClusterIPs: []string{"10.96.0.30"}, Ports: []*model.Port{{Name: "tcp", Port: 9000, Protocol: model.ProtocolTCP, TargetPort: 9000}}})
	h.waitForService(model.NamespacedName{Namespace: "amb", Name: "ext"})
	c := h.wdsClient()
	c.send(&discoveryv3.DeltaDiscoveryRequest{Node: ztunnelNode, TypeUrl: AddressType})
	r := c.expect(AddressType)
	checkWDS(t, "wildcard", r, []string{uid("echo-1"), uid("echo-2"), "amb/" + echoHost, extKey}, nil)
	c.ack(r)
	c.expectQuiet("after the ACK")

	runWDSSteps(t, h, c, []wdsStep{{
		name: "a slice names echo-1",
		change: func(s model.Store) {
			s.SetEndpoints(model.NamespacedName{Namespace: "amb", Name: "ext"}, "ext-manual", []*model.Endpoint{
				{Address: "10.0.0.1", Port: 9000, ServicePortName: "tcp", Namespace: "amb", FromPod: true},
			})
		},
		sent: []string{uid("echo-1")},
		check: func(t *testing.T, got map[string]*workloadapi.Address) {
			ports := got[uid("echo-1")].GetWorkload().GetServices()[extKey].GetPorts()
			if len(ports) != 1 || ports[0].GetServicePort() != 9000 || ports[0].GetTargetPort() != 9000 {
				t.Errorf("echo-1's services %v: want %s on 9000", got[uid("echo-1")].GetWorkload().GetServices(), extKey)
			}
		},
	}, {
		name: "the slice names echo-2 instead",
		change: func(s model.Store) {
			s.SetEndpoints(model.NamespacedName{Namespace: "amb", Name: "ext"}, "ext-manual", []*model.Endpoint{
				{Address: "10.0.0.2", Port: 9001, ServicePortName: "tcp", Namespace: "amb", FromPod: true},
			})
		},
		sent: []string{uid("echo-1"), uid("echo-2")},
		check: func(t *testing.T, got map[string]*workloadapi.Address) {
			if _, ok := got[uid("echo-1")].GetWorkload().GetServices()[extKey]; ok {
				t.Errorf("echo-1 still serves %s", extKey)
			}
			if ports := got[uid("echo-2")].GetWorkload().GetServices()[extKey].GetPorts(); len(ports) != 1 || ports[0].GetTargetPort() != 9001 {
				t.Errorf("echo-2's services %v: want %s to 9001", got[uid("echo-2")].GetWorkload().GetServices(), extKey)
			}
		},
	}})
}

// waitForService waits until the push context served has the service, so
// that a client subscribing next is answered with it.
func (h *harness) waitForService(name model.NamespacedName) {
	h.t.Helper()
	h.eventually(name.String()+" in the push context", func() bool {
		pc := h.server.PushContext()
		return pc != nil && pc.ServiceByName(name.Namespace, name.Name) != nil
	})
}
