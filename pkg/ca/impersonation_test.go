package ca

import (
	"context"
	"crypto/elliptic"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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
// caller's own Pod, and about the Pods of its node, decides the answer. A
// Pod it reports missing is a definitive refusal, counted like every other
// one. An API server that cannot answer makes the caller retry; one that
// refuses the CA itself (its RBAC lacks a permission) is the operator's to
// fix, and retrying would only hide it. Both are counted by their reason.
func TestImpersonationCallerPodLookup(t *testing.T) {
	ztunnelPod, appPod := impersonationPods()
	unreachable := errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
	forbidden := func(verb string) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "",
			errors.New(`User "system:serviceaccount:istio-system:meshpilot" cannot `+verb+` resource "pods"`))
	}
	cases := []struct {
		name      string
		pods      []runtime.Object
		getPod    error // nil: the API server answers
		listPods  error // nil: the API server answers
		code      codes.Code
		refusals  float64 // in meshpilot_ca_authorization_failure_count
		checkErr  string  // the error label of meshpilot_ca_caller_check_err_count counted once; none when empty
		msgSubstr string
	}{
		{"caller's Pod on the target's node", []runtime.Object{ztunnelPod, appPod}, nil, nil, codes.OK, 0, "", ""},
		{"caller's Pod deleted", []runtime.Object{appPod}, nil, nil, codes.PermissionDenied, 1, "", "no longer exists"},
		{"API server unreachable", []runtime.Object{ztunnelPod, appPod}, unreachable, nil,
			codes.Unavailable, 0, "UNAVAILABLE_ERROR", "retry"},
		{"API server overloaded", []runtime.Object{ztunnelPod, appPod}, apierrors.NewTooManyRequests("slow down", 1), nil,
			codes.Unavailable, 0, "UNAVAILABLE_ERROR", "retry"},
		{"API server times out", []runtime.Object{ztunnelPod, appPod},
			apierrors.NewServerTimeout(schema.GroupResource{Resource: "pods"}, "get", 1), nil, codes.Unavailable, 0, "UNAVAILABLE_ERROR", "retry"},
		{"API server unreachable listing the node's Pods", []runtime.Object{ztunnelPod, appPod}, nil, unreachable,
			codes.Unavailable, 0, "UNAVAILABLE_ERROR", "retry"},
		{"the CA may not get Pods", []runtime.Object{ztunnelPod, appPod}, forbidden("get"), nil,
			codes.FailedPrecondition, 0, "RBAC_ERROR", "RBAC"},
		{"the CA may not list Pods", []runtime.Object{ztunnelPod, appPod}, nil, forbidden("list"),
			codes.FailedPrecondition, 0, "RBAC_ERROR", "RBAC"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset(tc.pods...)
			failPodCalls(kube, func() error { return tc.getPod }, func() error { return tc.listPods })
			reg := prometheus.NewRegistry()
			m := NewMetrics(reg)
			srv := impersonationServer(t, kube, m, discard())
			_, err := srv.CreateCertificate(context.Background(), impersonationRequest(t))
			if got := status.Code(err); got != tc.code {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
			if err != nil && !strings.Contains(status.Convert(err).Message(), tc.msgSubstr) {
				t.Errorf("message %q does not say %q", status.Convert(err).Message(), tc.msgSubstr)
			}
			if got := testutil.ToFloat64(m.AuthzFailures); got != tc.refusals {
				t.Errorf("authorization failures counted: %v, want %v", got, tc.refusals)
			}
			for _, label := range []string{"UNAVAILABLE_ERROR", "RBAC_ERROR"} {
				want := 0.0
				if label == tc.checkErr {
					want = 1
				}
				if got := countedCheckErrors(t, reg, label); got != want {
					t.Errorf("meshpilot_ca_caller_check_err_count{error=%q} = %v, want %v", label, got, want)
				}
			}
		})
	}
}

// impersonationPods are a ztunnel and an application Pod on one node.
func impersonationPods() (ztunnel, app *corev1.Pod) {
	const node = "node-a"
	return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "node-sys", Name: "ztunnel-a", UID: "uid-a"},
			Spec:       corev1.PodSpec{ServiceAccountName: "ztunnel", NodeName: node},
		}, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app-1"},
			Spec:       corev1.PodSpec{ServiceAccountName: testID.ServiceAccount, NodeName: node},
		}
}

// failPodCalls makes kube's Pod get and list fail with what the functions
// return at the time of the call; nil lets the fake answer.
func failPodCalls(kube *fake.Clientset, get, list func() error) {
	kube.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		err := get()
		return err != nil, nil, err
	})
	kube.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		err := list()
		return err != nil, nil, err
	})
}

// impersonationServer is a CA whose caller is the ztunnel of
// impersonationPods, proven by a Pod-bound token, and trusted to
// impersonate.
func impersonationServer(t *testing.T, kube *fake.Clientset, m *Metrics, log *slog.Logger) *Server {
	t.Helper()
	ztunnelPod, _ := impersonationPods()
	caller := proven{
		Identity: Identity{TrustDomain: testID.TrustDomain, Namespace: "node-sys", ServiceAccount: "ztunnel"},
		PodName:  ztunnelPod.Name, PodUID: string(ztunnelPod.UID),
	}
	srv, err := NewServer(ServerOptions{
		Authority:      mustSelfSigned(t, Options{}),
		Authenticators: []Authenticator{caller},
		NodeAuthorizer: NewNodeAuthorizer(kube, []types.NamespacedName{{Namespace: "node-sys", Name: "ztunnel"}}),
		Metrics:        m,
		Logger:         log,
	})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// impersonationRequest asks for testID's certificate on its behalf.
func impersonationRequest(t *testing.T) *pb.IstioCertificateRequest {
	return &pb.IstioCertificateRequest{
		Csr:      string(csrFor(t, ecKey(t, elliptic.P256()), []string{testID.String()})),
		Metadata: impersonate(testID.String()),
	}
}

// countedCheckErrors reads meshpilot_ca_caller_check_err_count{error=label}
// from reg, by the name dashboards use; 0 when it has no such series.
func countedCheckErrors(t *testing.T, reg *prometheus.Registry, label string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "meshpilot_ca_caller_check_err_count" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "error" && l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
