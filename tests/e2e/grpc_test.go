package e2e

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/xds"
)

// bootstrapJSON is an Istio-style proxyless bootstrap for one node.
func bootstrapJSON(xdsAddr, nodeID, namespace, ip string, labels map[string]string) []byte {
	labelJSON := "{"
	first := true
	for k, v := range labels {
		if !first {
			labelJSON += ","
		}
		first = false
		labelJSON += fmt.Sprintf("%q:%q", k, v)
	}
	labelJSON += "}"
	return fmt.Appendf(nil, `{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": %q, "metadata": {"GENERATOR": "grpc", "NAMESPACE": %q, "INSTANCE_IPS": %q, "LABELS": %s}, "locality": {}},
  "server_listener_resource_name_template": "xds.istio.io/grpc/lds/inbound/%%s"
}`, xdsAddr, nodeID, namespace, ip, labelJSON)
}

func nodeID(ip, pod, namespace string) string {
	return fmt.Sprintf("sidecar~%s~%s.%s~%s.svc.cluster.local", ip, pod, namespace, namespace)
}

// backend is a grpc-go xDS server: it serves only once meshpilot has sent
// its inbound listener.
type backend struct {
	id   string
	port int
}

type echoServer struct {
	testgrpc.UnimplementedTestServiceServer
	id string
}

func (s *echoServer) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{ServerId: s.id}, nil
}

func startBackend(t *testing.T, cp *controlPlane, ip, namespace, id string, labels map[string]string) *backend {
	t.Helper()
	lis, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	boot := bootstrapJSON(cp.xdsAddr, nodeID(ip, id, namespace), namespace, ip, labels)
	srv, err := xds.NewGRPCServer(grpc.Creds(insecure.NewCredentials()), xds.BootstrapContentsForTesting(boot))
	if err != nil {
		t.Fatalf("xds server: %v", err)
	}
	testgrpc.RegisterTestServiceServer(srv, &echoServer{id: id})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return &backend{id: id, port: lis.Addr().(*net.TCPAddr).Port}
}

// client is a grpc-go client that resolves its target through xDS.
type client struct {
	id   string
	conn *grpc.ClientConn
	rpc  testgrpc.TestServiceClient
}

func newClient(t *testing.T, cp *controlPlane, ip, namespace, target string) *client {
	t.Helper()
	id := nodeID(ip, "client-0", namespace)
	resolver, err := xds.NewXDSResolverWithConfigForTesting(bootstrapJSON(cp.xdsAddr, id, namespace, ip, map[string]string{"app": "client"}))
	if err != nil {
		t.Fatalf("xds resolver: %v", err)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(resolver))
	if err != nil {
		t.Fatalf("dial %s: %v", target, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &client{id: id, conn: conn, rpc: testgrpc.NewTestServiceClient(conn)}
}

// call makes one RPC and returns the ID of the backend that answered.
func (c *client) call() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.rpc.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return "", err
	}
	return resp.GetServerId(), nil
}

// callN makes n RPCs and counts the answers by backend.
func (c *client) callN(n int) (map[string]int, error) {
	seen := map[string]int{}
	for range n {
		id, err := c.call()
		if err != nil {
			return seen, err
		}
		seen[id]++
	}
	return seen, nil
}

// hostIP is an address of this machine outside the loopback range: the API
// server refuses loopback endpoint addresses, and backends must really
// listen where their EndpointSlice says.
func hostIP(t *testing.T) string {
	t.Helper()
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := iface.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLinkLocalUnicast() {
				return ipn.IP.String()
			}
		}
	}
	t.Fatal("this machine has no non-loopback IPv4 address for test backends")
	return ""
}
