package bootstrap

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestMaxConnectionAgeMovesClients asserts what
// --keepalive-max-server-connection-age is for: a connection past its age
// is told to go away, its ADS stream ends with UNAVAILABLE once the grace
// is over (the status on which Envoy and gRPC reconnect), and the client's
// next connection is served from scratch.
func TestMaxConnectionAgeMovesClients(t *testing.T) {
	dir := t.TempDir()
	svc := "apiVersion: v1\nkind: Service\nmetadata: {name: echo, namespace: demo}\nspec:\n  ports: [{name: grpc, port: 7070}]\n"
	if err := os.WriteFile(filepath.Join(dir, "svc.yaml"), []byte(svc), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.ConfigDir = dir
	opts.XDSAddr, opts.HTTPAddr, opts.MonitoringAddr, opts.Webhook.Addr = "127.0.0.1:0", "", "", ""
	// The first answer must come within the age and its grace, on a loaded
	// machine too: the client dials once the server is ready.
	opts.MaxConnectionAge, opts.MaxConnectionAgeGrace = 2*time.Second, time.Second
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(30 * time.Second); srv.notReadyReason() != ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %s", srv.notReadyReason())
		}
	}

	conn, err := grpc.NewClient(srv.XDSAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	node := &corev3.Node{Id: "sidecar~10.0.0.1~client-0.demo~demo.svc.cluster.local"}
	subscribe := func(stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient) {
		t.Helper()
		if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster"}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil || len(resp.GetResources()) == 0 {
			t.Fatalf("CDS: %d clusters, %v; want the mesh's clusters", len(resp.GetResources()), err)
		}
	}

	streamCtx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	stream, err := ads.StreamAggregatedResources(streamCtx)
	if err != nil {
		t.Fatal(err)
	}
	subscribe(stream)
	for {
		_, err := stream.Recv()
		if err == nil {
			continue // a push; the stream goes on
		}
		if streamCtx.Err() != nil {
			t.Fatal("the stream outlived its connection's maximum age by far")
		}
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("the aged stream ended with %v; want UNAVAILABLE, on which clients reconnect", err)
		}
		break
	}

	again, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	subscribe(again)
}
