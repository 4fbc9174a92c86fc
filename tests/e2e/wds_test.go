package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/pkg/workloadapi"
)

const (
	wdsAddressType = "type.googleapis.com/istio.workload.Address"
	wdsAuthzType   = "type.googleapis.com/istio.security.Authorization"
	wdsNS          = "ambient-wds"
)

// wdsClient is a node proxy's delta xDS client, as ztunnel behaves: it
// keeps the Addresses it was sent by name, applies removals, and ACKs each
// response. It records every response for assertions.
type wdsClient struct {
	stream grpc.BidiStreamingClient[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]
	sendMu sync.Mutex

	mu        sync.Mutex
	addresses map[string]*workloadapi.Address
	responses []*discoveryv3.DeltaDiscoveryResponse
	err       error
}

func dialWDS(t *testing.T, conn *grpc.ClientConn, node *corev3.Node) *wdsClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &wdsClient{stream: stream, addresses: map[string]*workloadapi.Address{}}
	c.send(t, &discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: wdsAddressType})
	c.send(t, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: wdsAuthzType})
	go c.run()
	return c
}

func (c *wdsClient) send(t *testing.T, req *discoveryv3.DeltaDiscoveryRequest) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if err := c.stream.Send(req); err != nil {
		t.Errorf("send: %v", err)
	}
}

func (c *wdsClient) run() {
	for {
		resp, err := c.stream.Recv()
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			return
		}
		ack := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}
		c.mu.Lock()
		c.responses = append(c.responses, resp)
		for _, r := range resp.GetResources() {
			a := &workloadapi.Address{}
			if err := proto.Unmarshal(r.GetResource().GetValue(), a); err != nil {
				// The test fails on c.err at its next look at the state.
				c.err = fmt.Errorf("%s does not decode: %v", r.GetName(), err)
				continue
			}
			if resp.GetTypeUrl() == wdsAddressType {
				c.addresses[r.GetName()] = a
			}
		}
		for _, name := range resp.GetRemovedResources() {
			delete(c.addresses, name)
		}
		c.mu.Unlock()
		c.sendMu.Lock()
		_ = c.stream.Send(ack)
		c.sendMu.Unlock()
	}
}

// state returns the names held, sorted, and a copy of one Address.
func (c *wdsClient) state(name string) ([]string, *workloadapi.Address, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for n := range c.addresses {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, c.addresses[name], c.err
}

// removals lists every name a response removed, in order.
func (c *wdsClient) removals(typeURL string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range c.responses {
		if r.GetTypeUrl() == typeURL {
			out = append(out, r.GetRemovedResources()...)
		}
	}
	return out
}

func (c *wdsClient) answered(typeURL string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.ContainsFunc(c.responses, func(r *discoveryv3.DeltaDiscoveryResponse) bool { return r.GetTypeUrl() == typeURL })
}

func wdsPodYAML(name string, captured bool) string {
	annotations := "{}"
	if captured {
		annotations = "{ambient.istio.io/redirection: enabled}"
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  labels: {app: echo, version: v1}
  annotations: %s
spec:
  serviceAccountName: echo
  nodeName: node-1
  containers:
  - name: echo
    image: echo
    ports: [{name: http-port, containerPort: 8080}]
`, name, wdsNS, annotations)
}

// runningPod patches what the kubelet would: the Pod's IP and readiness.
func runningPod(t *testing.T, m *kubeMesh, name, ip string) {
	t.Helper()
	m.run(t, "", "patch", "pod", name, "-n", wdsNS, "--subresource=status", "--type=merge", "-p",
		`{"status":{"phase":"Running","podIP":"`+ip+`","podIPs":[{"ip":"`+ip+`"}],`+
			`"conditions":[{"type":"Ready","status":"True"}]}}`)
}

// TestWDSNodeProxyFollowsPods: a node proxy proves its identity on 15012,
// subscribes to WDS over delta, and follows Pods created and deleted
// through the API server: a new Pod arrives as its Address, with its
// identity, service and HBONE once captured; a deleted Pod arrives as a
// delta removal of its uid.
func TestWDSNodeProxyFollowsPods(t *testing.T) {
	m := newKubeMesh(t)
	m.apply(t, "namespace", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: "+wdsNS+"\n  labels: {istio.io/dataplane-mode: ambient}\n")
	m.apply(t, "service", `apiVersion: v1
kind: Service
metadata: {name: echo, namespace: `+wdsNS+`}
spec:
  selector: {app: echo}
  ports: [{name: http, port: 80, targetPort: http-port}]
`)
	m.apply(t, "echo-1", wdsPodYAML("echo-1", true))
	runningPod(t, m, "echo-1", "10.244.1.1")
	cp := startControlPlane(t, m)

	conn := identityConn(t, m, cp, "istio-system", "ztunnel")
	node := &corev3.Node{Id: "ztunnel~10.244.0.9~ztunnel-x2x.istio-system~istio-system.svc.cluster.local"}
	c := dialWDS(t, conn, node)

	svcName := wdsNS + "/echo." + wdsNS + ".svc.cluster.local"
	uid := func(pod string) string { return "Kubernetes//Pod/" + wdsNS + "/" + pod }

	waitFor(t, 30*time.Second, "echo-1 and its service", func() error {
		names, a, err := c.state(uid("echo-1"))
		if err != nil {
			return err
		}
		if !slices.Contains(names, svcName) || a == nil {
			return fmt.Errorf("holding %v", names)
		}
		w := a.GetWorkload()
		switch {
		case w.GetTunnelProtocol() != workloadapi.TunnelProtocol_HBONE:
			return fmt.Errorf("echo-1 tunnel %v, want HBONE", w.GetTunnelProtocol())
		case w.GetServiceAccount() != "echo" || w.GetNamespace() != wdsNS || w.GetNode() != "node-1":
			return fmt.Errorf("echo-1 identity %s/%s on %q", w.GetNamespace(), w.GetServiceAccount(), w.GetNode())
		case w.GetServices()[svcName].GetPorts()[0].GetTargetPort() != 8080:
			return fmt.Errorf("echo-1 services %v, want port 80 to the named 8080", w.GetServices())
		}
		return nil
	})
	if !c.answered(wdsAuthzType) {
		t.Error("the Authorization subscription was not answered")
	}

	// A Pod whose capture is not in place gets no tunnel, even in an
	// ambient namespace.
	m.apply(t, "echo-2", wdsPodYAML("echo-2", false))
	runningPod(t, m, "echo-2", "10.244.1.2")
	waitFor(t, 30*time.Second, "echo-2", func() error {
		_, a, err := c.state(uid("echo-2"))
		if err != nil {
			return err
		}
		if a == nil {
			return fmt.Errorf("echo-2 not held")
		}
		if a.GetWorkload().GetTunnelProtocol() != workloadapi.TunnelProtocol_NONE {
			return fmt.Errorf("echo-2 tunnel %v before its capture", a.GetWorkload().GetTunnelProtocol())
		}
		return nil
	})

	m.run(t, "", "delete", "pod", "echo-1", "-n", wdsNS, "--grace-period=0", "--force")
	waitFor(t, 30*time.Second, "echo-1 removed", func() error {
		names, _, err := c.state("")
		if err != nil {
			return err
		}
		if slices.Contains(names, uid("echo-1")) {
			return fmt.Errorf("still holding %v", names)
		}
		return nil
	})
	if got := c.removals(wdsAddressType); !slices.Equal(got, []string{uid("echo-1")}) {
		t.Errorf("removals %v, want exactly echo-1's uid", got)
	}
	// The API server's own Service is in the mesh too, and so is the
	// API server: its EndpointSlice, which it writes itself, names no Pod.
	apiSlices, err := kubeClientFor(t, m).DiscoveryV1().EndpointSlices("default").List(context.Background(),
		metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kubernetes"})
	if err != nil || len(apiSlices.Items) != 1 || len(apiSlices.Items[0].Endpoints) != 1 {
		t.Fatalf("the kubernetes Service's EndpointSlices: %v (%v)", apiSlices, err)
	}
	apiServer := "Kubernetes/discovery.k8s.io/EndpointSlice/default/kubernetes/" + apiSlices.Items[0].Endpoints[0].Addresses[0]
	want := []string{uid("echo-2"), apiServer, svcName, "default/kubernetes.default.svc.cluster.local"}
	if names, _, _ := c.state(""); !slices.Equal(names, want) {
		t.Errorf("holding %v, want %v", names, want)
	}
}
