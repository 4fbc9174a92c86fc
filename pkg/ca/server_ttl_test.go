package ca

import (
	"context"
	"crypto/elliptic"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"
)

// TestCreateCertificateRefusesLifetimesAboveTheMax: validity_duration is
// seconds in an int64; a lifetime above the maximum is refused
// (TTL_ERROR) however large it is, never turned into another lifetime by
// overflowing the conversion to a time.Duration.
func TestCreateCertificateRefusesLifetimesAboveTheMax(t *testing.T) {
	a := mustSelfSigned(t, Options{})
	maxSeconds := int64(DefaultMaxCertTTL / time.Second)
	for _, tc := range []struct {
		name    string
		seconds int64
		want    codes.Code
	}{
		{"the max", maxSeconds, codes.OK},
		{"a second above the max", maxSeconds + 1, codes.InvalidArgument},
		// 2^55 s plus an hour wraps, in nanoseconds, to exactly an hour.
		{"wraps to an hour", 1<<55 + 3600, codes.InvalidArgument},
		{"wraps to a negative", math.MaxInt64, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			metrics := NewMetrics(nil)
			s, err := NewServer(ServerOptions{Authority: a, Authenticators: []Authenticator{proven{Identity: testID}}, Metrics: metrics, Logger: discard()})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := s.CreateCertificate(context.Background(), &pb.IstioCertificateRequest{
				Csr: string(csrFor(t, ecKey(t, elliptic.P256()), nil)), ValidityDuration: tc.seconds,
			})
			if status.Code(err) != tc.want {
				t.Fatalf("got %v (chain of %d), want %v", err, len(resp.GetCertChain()), tc.want)
			}
			if tc.want == codes.OK {
				return
			}
			if got := testutil.ToFloat64(metrics.SignErrors.WithLabelValues(ErrTTL.Label)); got != 1 {
				t.Errorf("citadel_server_csr_sign_err_count{error=TTL_ERROR} = %v, want 1", got)
			}
		})
	}
}
