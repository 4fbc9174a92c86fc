package ca

import (
	"crypto/elliptic"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestTokenReviewFailures: a TokenReview the API server cannot answer makes
// the caller retry, and is counted by its reason.
func TestTokenReviewFailures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		review   error
		code     codes.Code
		checkErr string
	}{
		{"API server unreachable", errors.New("dial tcp 10.96.0.1:443: connect: connection refused"), codes.Unavailable, "UNAVAILABLE_ERROR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset()
			kube.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tc.review
			})
			reg := prometheus.NewRegistry()
			m := NewMetrics(reg)
			srv, err := NewServer(ServerOptions{
				Authority:      mustSelfSigned(t, Options{}),
				Authenticators: []Authenticator{NewTokenAuthenticator(kube, TokenOptions{Logger: discard()})},
				Metrics:        m,
				Logger:         discard(),
			})
			if err != nil {
				t.Fatal(err)
			}
			_, err = srv.CreateCertificate(withBearer("a-token"), &pb.IstioCertificateRequest{
				Csr: string(csrFor(t, ecKey(t, elliptic.P256()), nil)),
			})
			if got := status.Code(err); got != tc.code {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
			if got := testutil.ToFloat64(m.AuthnFailures); got != 1 {
				t.Errorf("authentication failures counted: %v, want 1", got)
			}
			if got := countedCheckErrors(t, reg, tc.checkErr); got != 1 {
				t.Errorf("meshpilot_ca_caller_check_err_count{error=%q} = %v, want 1", tc.checkErr, got)
			}
		})
	}
}
