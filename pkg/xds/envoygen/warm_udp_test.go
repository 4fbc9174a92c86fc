package envoygen

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/xds"
)

// TestUDPPortsWarm: an Envoy that sees kube-dns must warm fully. Its EDS
// clusters wait for their load assignment with no initial_fetch_timeout,
// and Envoy initializes listeners only once every cluster has warmed: one
// cluster whose assignment never comes (the TCP port's, when a lookup by
// number finds the UDP port) leaves the sidecar without any listener.
func TestUDPPortsWarm(t *testing.T) {
	f := loadFixture(t, filepath.Join("testdata", "clusters", "udp-ports.in.yaml"))
	conn := serveADS(t, f.store)
	const kubeDNS = "outbound|53||kube-dns.kube-system.svc.cluster.local"
	// An empty assignment would warm the cluster too, and still send
	// every DNS query over TCP nowhere.
	kubeDNSServed := func(s xdstest.Snapshot) error {
		if len(s.Endpoints[kubeDNS].GetEndpoints()) == 0 {
			return fmt.Errorf("%s has no endpoints", kubeDNS)
		}
		return nil
	}
	for _, tp := range f.proxies {
		for _, mode := range []xdstest.Mode{xdstest.SotW, xdstest.Delta} {
			t.Run(tp.Name+"/"+mode.String(), func(t *testing.T) {
				c := xdstest.NewEnvoyClient(t, conn, tp.node(t), mode)
				c.RequireWarm(10*time.Second, kubeDNSServed)
			})
		}
	}
}

// node is the Envoy node of the proxy, with the metadata Istio's bootstrap
// sets.
func (p testProxy) node(t *testing.T) *corev3.Node {
	t.Helper()
	labels := map[string]any{}
	for k, v := range p.Labels {
		labels[k] = v
	}
	meta, err := structpb.NewStruct(map[string]any{
		"NAMESPACE": p.Namespace, "INSTANCE_IPS": strings.Join(p.IPs, ","), "LABELS": labels,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &corev3.Node{Id: p.model().ID, Metadata: meta}
}

// serveADS serves store over ADS with this package's generators, as the
// control plane does for sidecars, and returns a connection to it.
func serveADS(t *testing.T, store model.Store) *grpc.ClientConn {
	t.Helper()
	gens := map[string]xds.Generator{}
	for typeURL, g := range New(Options{}).ByTypeURL() {
		gens[typeURL] = g
	}
	srv := xds.NewServer(xds.Options{Store: store, PushContext: testPushOptions(),
		Generators: func(*model.Proxy) map[string]xds.Generator { return gens }})
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer(xds.ServerOptions()...)
	srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Start(ctx)
	}()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
		cancel()
		<-done
		g.Stop()
	})
	return conn
}
