package xds

import (
	"errors"
	"io"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// Once Stop is called, a stream that opens (the gRPC server's listeners
// close a moment later) ends at once, cleanly, as the streams already open
// do (TestStopEndsStreamsCleanly), and is never served: a proxy must not
// take config from a replica that is leaving.
func TestStoppedServerServesNoNewStream(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	h.server.Stop()
	// The stream's request is waiting when the handler starts, so a handler
	// that chose between it and the stop at random would sometimes answer.
	for range 20 {
		sotw := h.sotw("late")
		// The send fails if the stream has already ended, which is fine.
		_ = sotw.stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: ClusterType, Node: nodeFor("late")})
		select {
		case r := <-sotw.responses:
			t.Fatalf("a stream opened after Stop was served %s", shortType(r.GetTypeUrl()))
		case err := <-sotw.errs:
			if !errors.Is(err, io.EOF) {
				t.Fatalf("sotw stream opened after Stop ended with %v, want a clean EOF", err)
			}
		}
		delta := h.delta("late-delta")
		_ = delta.stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ClusterType, Node: nodeFor("late-delta")})
		select {
		case r := <-delta.responses:
			t.Fatalf("a delta stream opened after Stop was served %s", shortType(r.GetTypeUrl()))
		case err := <-delta.errs:
			if !errors.Is(err, io.EOF) {
				t.Fatalf("delta stream opened after Stop ended with %v, want a clean EOF", err)
			}
		}
	}
}
