package main

import (
	"context"
	"fmt"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/xds"
)

type echoServer struct {
	testgrpc.UnimplementedTestServiceServer
	id string
}

func (s *echoServer) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{ServerId: s.id}, nil
}

// runServer serves until ctx ends. An xDS server accepts calls only once
// meshpilot has sent its inbound listener; until then it is not serving.
func runServer(ctx context.Context, addr, id string) error {
	srv, err := xds.NewGRPCServer(
		grpc.Creds(insecure.NewCredentials()),
		// Without a callback, grpc-go reports every mode change, the healthy
		// ones too, at ERROR level; say what each change means instead.
		xds.ServingModeCallback(func(a net.Addr, args xds.ServingModeChangeArgs) {
			if args.Mode == connectivity.ServingModeServing {
				log.Printf("%s serving on %s: listener received from meshpilot", id, a)
				return
			}
			log.Printf("%s not serving on %s yet: %v", id, a, args.Err)
		}),
	)
	if err != nil {
		return fmt.Errorf("xds server (is GRPC_XDS_BOOTSTRAP set?): %w", err)
	}
	testgrpc.RegisterTestServiceServer(srv, &echoServer{id: id})
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	log.Printf("%s listening on %s, waiting for its listener from meshpilot", id, addr)
	return srv.Serve(lis)
}
