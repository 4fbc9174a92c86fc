package ca

import (
	"context"
	"crypto/elliptic"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestImpersonationCallerPodLookup: what the API server says about the
// caller's own Pod decides the answer. A Pod it reports missing is a
// definitive refusal, counted like every other one; only an API server
// that cannot answer makes the caller retry.
func TestImpersonationCallerPodLookup(t *testing.T) {
	const node = "node-a"
	ztunnelPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "node-sys", Name: "ztunnel-a", UID: "uid-a"},
		Spec:       corev1.PodSpec{ServiceAccountName: "ztunnel", NodeName: node},
	}
	appPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app-1"},
		Spec:       corev1.PodSpec{ServiceAccountName: testID.ServiceAccount, NodeName: node},
	}
	podGetFails := func(err error) k8stesting.ReactionFunc {
		return func(a k8stesting.Action) (bool, runtime.Object, error) {
			return a.(k8stesting.GetAction).GetName() == ztunnelPod.Name, nil, err
		}
	}
	cases := []struct {
		name      string
		pods      []runtime.Object
		getPod    k8stesting.ReactionFunc // nil: the API server answers
		code      codes.Code
		refusals  float64 // in meshpilot_ca_authorization_failure_count
		msgSubstr string
	}{
		{"caller's Pod on the target's node", []runtime.Object{ztunnelPod, appPod}, nil, codes.OK, 0, ""},
		{"caller's Pod deleted", []runtime.Object{appPod}, nil, codes.PermissionDenied, 1, "no longer exists"},
		{"API server unreachable", []runtime.Object{ztunnelPod, appPod},
			podGetFails(errors.New("dial tcp 10.96.0.1:443: connect: connection refused")), codes.Unavailable, 0, "retry"},
		{"API server overloaded", []runtime.Object{ztunnelPod, appPod},
			podGetFails(apierrors.NewTooManyRequests("slow down", 1)), codes.Unavailable, 0, "retry"},
		{"API server times out", []runtime.Object{ztunnelPod, appPod},
			podGetFails(apierrors.NewServerTimeout(schema.GroupResource{Resource: "pods"}, "get", 1)), codes.Unavailable, 0, "retry"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset(tc.pods...)
			if tc.getPod != nil {
				kube.PrependReactor("get", "pods", tc.getPod)
			}
			caller := proven{
				Identity: Identity{TrustDomain: testID.TrustDomain, Namespace: "node-sys", ServiceAccount: "ztunnel"},
				PodName:  ztunnelPod.Name, PodUID: string(ztunnelPod.UID),
			}
			m := NewMetrics(nil)
			srv, err := NewServer(ServerOptions{
				Authority:      mustSelfSigned(t, Options{}),
				Authenticators: []Authenticator{caller},
				NodeAuthorizer: NewNodeAuthorizer(kube, []types.NamespacedName{{Namespace: "node-sys", Name: "ztunnel"}}),
				Metrics:        m,
				Logger:         discard(),
			})
			if err != nil {
				t.Fatal(err)
			}
			_, err = srv.CreateCertificate(context.Background(), &pb.IstioCertificateRequest{
				Csr:      string(csrFor(t, ecKey(t, elliptic.P256()), []string{testID.String()})),
				Metadata: impersonate(testID.String()),
			})
			if got := status.Code(err); got != tc.code {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
			if err != nil && !strings.Contains(status.Convert(err).Message(), tc.msgSubstr) {
				t.Errorf("message %q does not say %q", status.Convert(err).Message(), tc.msgSubstr)
			}
			if got := testutil.ToFloat64(m.AuthzFailures); got != tc.refusals {
				t.Errorf("authorization failures counted: %v, want %v", got, tc.refusals)
			}
		})
	}
}
