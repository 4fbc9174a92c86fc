package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	_ "google.golang.org/grpc/xds" // the xds:/// resolver
)

// runClient calls target count times (forever when count is 0, until ctx
// ends) and prints who answered each call. A failed call is printed and the
// client goes on: while someone edits the mesh, a call may find no backend,
// and the next ones show the mesh recover.
func runClient(ctx context.Context, out io.Writer, target string, count int, interval time.Duration) error {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	answered := map[string]int{}
	failed := 0
	for i := 0; (count == 0 || i < count) && ctx.Err() == nil; i++ {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := client.UnaryCall(callCtx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
		cancel()
		switch {
		case ctx.Err() != nil:
		case err != nil:
			failed++
			fmt.Fprintf(out, "call %d failed: %v\n", i, err)
		default:
			answered[resp.GetServerId()]++
			fmt.Fprintf(out, "call %d answered by %s\n", i, resp.GetServerId())
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
	fmt.Fprint(out, "answered:")
	for _, id := range slices.Sorted(maps.Keys(answered)) {
		fmt.Fprintf(out, " %s %d", id, answered[id])
	}
	fmt.Fprintf(out, ", failed %d\n", failed)
	if failed > 0 {
		return fmt.Errorf("%d of the calls failed", failed)
	}
	return nil
}
