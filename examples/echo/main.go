// Command echo is a proxyless gRPC client and server that get all their
// configuration from meshpilot over xDS. It exists so that the README's
// quick start runs real grpc-go xDS code against `make run`.
//
//	GRPC_XDS_BOOTSTRAP=examples/bootstrap/echo-v1.json go run ./examples/echo -serve 127.0.0.1:17070 -id echo-v1
//	GRPC_XDS_BOOTSTRAP=examples/bootstrap/client.json go run ./examples/echo -target xds:///echo.demo.svc.cluster.local:7070
//
// The client calls until it is stopped (Ctrl-C), or -n times, and prints
// which backend answered each call.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	serve := flag.String("serve", "", "serve on this ip:port as an xDS-managed gRPC server")
	id := flag.String("id", "echo", "server ID put in every response")
	target := flag.String("target", "", "call this xds:/// target")
	count := flag.Int("n", 0, "number of calls the client makes; 0 calls until stopped")
	interval := flag.Duration("interval", 500*time.Millisecond, "pause between calls")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch {
	case *serve != "":
		if err := runServer(ctx, *serve, *id); err != nil {
			log.Fatal(err)
		}
	case *target != "":
		if err := runClient(ctx, os.Stdout, *target, *count, *interval); err != nil {
			log.Fatal(err)
		}
	default:
		flag.Usage()
		os.Exit(2)
	}
}
