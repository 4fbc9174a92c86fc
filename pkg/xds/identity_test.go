package xds

import (
	"context"
	"errors"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// TestProvenIdentityBindsTheNamespace: what a stream proves decides the
// namespace a proxy may claim; node metadata alone never does.
func TestProvenIdentityBindsTheNamespace(t *testing.T) {
	web := &model.Identity{TrustDomain: "cluster.local", Namespace: "default", ServiceAccount: "web"}
	cases := []struct {
		name     string
		proof    *model.Identity
		err      error
		wantCode codes.Code
		wantID   *model.Identity
	}{
		{name: "no proof needed (plaintext)", wantCode: codes.OK},
		{name: "proved the namespace it claims", proof: web, wantCode: codes.OK, wantID: web},
		{name: "proved another namespace", proof: &model.Identity{TrustDomain: "cluster.local", Namespace: "payments", ServiceAccount: "web"},
			wantCode: codes.PermissionDenied},
		{name: "proof refused", err: status.Error(codes.Unauthenticated, "token: expired"), wantCode: codes.Unauthenticated},
		{name: "proof failed without a status", err: errors.New("no credential"), wantCode: codes.Unauthenticated},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{seed: seedAB, authenticate: func(context.Context) (*model.Identity, error) {
				return tc.proof, tc.err
			}})
			c := h.sotw("client") // claims namespace default
			c.send(&discoveryv3.DiscoveryRequest{TypeUrl: ClusterType})
			if tc.wantCode != codes.OK {
				if err := c.streamError(); status.Code(err) != tc.wantCode {
					t.Fatalf("stream ended with %v, want %v", err, tc.wantCode)
				}
				return
			}
			c.expect(ClusterType)
			conns := h.server.connections()
			if len(conns) != 1 {
				t.Fatalf("%d connections, want 1", len(conns))
			}
			if got := conns[0].proxy.VerifiedIdentity; (got == nil) != (tc.wantID == nil) || (got != nil && *got != *tc.wantID) {
				t.Fatalf("verified identity %v, want %v", got, tc.wantID)
			}
		})
	}
}
