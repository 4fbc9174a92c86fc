package controllers

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshpilot/meshpilot/internal/kubetest"
)

// TestListSizedAgainstAPIServer lists Services from a real API server the
// way the sized informers do: answered in protobuf, the list is decoded with
// Items sized first and equals the typed client's; answered in JSON, it
// goes through client-go's decoder; and an error is client-go's error.
func TestListSizedAgainstAPIServer(t *testing.T) {
	t.Parallel()
	env := kubetest.Start(t)
	ctx := context.Background()
	ns := env.Namespace(t, "sized")
	for i := range 5 {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i), Namespace: ns},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
		if _, err := env.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	opts := metav1.ListOptions{LabelSelector: "", FieldSelector: "metadata.namespace=" + ns}
	want, err := env.Kube.CoreV1().Services(ns).List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name      string
		cfg       *rest.Config
		wantSized bool
	}{
		{"protobuf", BuiltinKindsConfig(env.Config), true},
		{"json", env.Config, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client, err := kubernetes.NewForConfig(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			var got corev1.ServiceList
			sized, err := listSized[corev1.Service](ctx, client.CoreV1().RESTClient(), "services", opts, &got, "ServiceList", &got.ListMeta, &got.Items)
			if err != nil {
				t.Fatal(err)
			}
			if sized != tc.wantSized {
				t.Errorf("sized = %v, want %v", sized, tc.wantSized)
			}
			if len(got.Items) != 5 || !apiequality.Semantic.DeepEqual(got.Items, want.Items) {
				t.Errorf("listed %d Services, want the typed client's %d:\n%+v\n%+v", len(got.Items), len(want.Items), got.Items, want.Items)
			}
		})
	}

	client, err := kubernetes.NewForConfig(BuiltinKindsConfig(env.Config))
	if err != nil {
		t.Fatal(err)
	}
	var got corev1.ServiceList
	bad := metav1.ListOptions{FieldSelector: "spec.nonsense=1"}
	if _, err := listSized[corev1.Service](ctx, client.CoreV1().RESTClient(), "services", bad, &got, "ServiceList", &got.ListMeta, &got.Items); err == nil {
		t.Error("a list with a field selector the API server rejects succeeded")
	}
}
