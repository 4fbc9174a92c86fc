package ca

import (
	"context"
	"crypto/elliptic"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	pb "istio.io/api/security/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestImpersonation(t *testing.T) {
	t.Parallel()
	const sys = "node-sys"
	f := startCA(t, []types.NamespacedName{{Namespace: sys, Name: "ztunnel"}})
	env := f.env
	if _, err := env.Kube.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sys}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace(t, "workloads")
	for _, sa := range []string{"app", "far", "done", "nopod"} {
		createSA(t, env, ns, sa)
	}
	createSA(t, env, sys, "ztunnel")
	createSA(t, env, sys, "intruder")
	createPod(t, env, ns, "app-1", "app", "node-a")
	createPod(t, env, ns, "far-1", "far", "node-b")
	done := createPod(t, env, ns, "done-1", "done", "node-a")
	done.Status.Phase = corev1.PodSucceeded
	if _, err := env.Kube.CoreV1().Pods(ns).UpdateStatus(context.Background(), done, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	ztunnel := token(t, env, sys, "ztunnel", []string{"istio-ca"}, createPod(t, env, sys, "ztunnel-a", "ztunnel", "node-a"))
	unbound := token(t, env, sys, "ztunnel", []string{"istio-ca"}, nil)
	intruder := token(t, env, sys, "intruder", []string{"istio-ca"}, createPod(t, env, sys, "intruder-a", "intruder", "node-a"))

	id := func(sa string) string { return "spiffe://cluster.local/ns/" + ns + "/sa/" + sa }
	zid := "spiffe://cluster.local/ns/" + sys + "/sa/ztunnel"
	key := ecKey(t, elliptic.P256())
	c := f.client(t, nil)

	tests := []struct {
		name   string
		tok    string
		meta   *structpb.Struct
		csrSAN []string
		code   codes.Code
		msg    string
	}{
		{"trusted node account, pod on its node", ztunnel, impersonate(id("app")), []string{id("app")}, codes.OK, ""},
		{"trusted node account, pod on another node", ztunnel, impersonate(id("far")), nil, codes.PermissionDenied, `node "node-a"`},
		{"trusted node account, no pod of that identity", ztunnel, impersonate(id("nopod")), nil, codes.PermissionDenied, "no Pod"},
		{"trusted node account, only a finished pod on its node", ztunnel, impersonate(id("done")), nil, codes.PermissionDenied, "no Pod"},
		{"trusted node account, token not bound to a pod", unbound, impersonate(id("app")), nil, codes.PermissionDenied, "Pod-bound"},
		{"untrusted caller, pod on its node", intruder, impersonate(id("app")), nil, codes.PermissionDenied, "not a trusted node account"},
		{"trusted node account, identity of another trust domain", ztunnel, impersonate("spiffe://other.td/ns/" + ns + "/sa/app"), nil, codes.PermissionDenied, "trust domain"},
		{"trusted node account, malformed identity", ztunnel, impersonate("app"), nil, codes.InvalidArgument, "spiffe://"},
		{"trusted node account, identity not a string", ztunnel, &structpb.Struct{Fields: map[string]*structpb.Value{
			ImpersonatedIdentityKey: structpb.NewNumberValue(1)}}, nil, codes.InvalidArgument, "must be a string"},
		{"impersonating, CSR names the node proxy itself", ztunnel, impersonate(id("app")), []string{zid}, codes.InvalidArgument, "asks for identity"},
		{"no impersonation: the node proxy's own identity", ztunnel, nil, []string{zid}, codes.OK, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.CreateCertificate(bearerCtx(tc.tok), &pb.IstioCertificateRequest{
				Csr: string(csrFor(t, key, tc.csrSAN)), Metadata: tc.meta,
			})
			if tc.code != codes.OK {
				if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.msg) {
					t.Fatalf("got %v, want %s saying %q", err, tc.code, tc.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := leafOf(t, f, resp).URIs[0].String(); got != tc.csrSAN[0] {
				t.Errorf("issued for %s, want %s", got, tc.csrSAN[0])
			}
		})
	}
}
