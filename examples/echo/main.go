// Command echo is a proxyless gRPC client and server that get all their
// configuration from meshpilot over xDS. It exists so that the README's
// walkthrough runs real grpc-go xDS code against `make run`.
//
//	GRPC_XDS_BOOTSTRAP=examples/bootstrap/server.json go run ./examples/echo -serve 127.0.0.1:17070 -id echo-v1
//	GRPC_XDS_BOOTSTRAP=examples/bootstrap/client.json go run ./examples/echo -target xds:///echo.demo.svc.cluster.local:7070
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/xds"
)

func main() {
	serve := flag.String("serve", "", "serve on this ip:port as an xDS-managed gRPC server")
	id := flag.String("id", "echo", "server ID put in every response")
	target := flag.String("target", "", "call this xds:/// target")
	count := flag.Int("n", 10, "number of calls the client makes")
	interval := flag.Duration("interval", 200*time.Millisecond, "pause between calls")
	flag.Parse()

	switch {
	case *serve != "":
		if err := runServer(*serve, *id); err != nil {
			log.Fatal(err)
		}
	case *target != "":
		if err := runClient(*target, *count, *interval); err != nil {
			log.Fatal(err)
		}
	default:
		flag.Usage()
		os.Exit(2)
	}
}

type echoServer struct {
	testgrpc.UnimplementedTestServiceServer
	id string
}

func (s *echoServer) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{ServerId: s.id}, nil
}

func runServer(addr, id string) error {
	srv, err := xds.NewGRPCServer(grpc.Creds(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("xds server (is GRPC_XDS_BOOTSTRAP set?): %w", err)
	}
	testgrpc.RegisterTestServiceServer(srv, &echoServer{id: id})
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt)
		<-sig
		srv.GracefulStop()
	}()
	log.Printf("echo %s serving on %s", id, addr)
	return srv.Serve(lis)
}

func runClient(target string, count int, interval time.Duration) error {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	for i := range count {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.WaitForReady(true))
		cancel()
		if err != nil {
			return fmt.Errorf("call %d: %w", i, err)
		}
		fmt.Printf("call %d answered by %s\n", i, resp.GetServerId())
		time.Sleep(interval)
	}
	return nil
}
