package ca

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// TestRootCertCreateRefusals covers the race the API server test cannot
// force: the namespace informer still shows a namespace as active when the
// API server already refuses new objects in it. That refusal ends the
// repair (a retry would be refused again); any other error is retried.
func TestRootCertCreateRefusals(t *testing.T) {
	terminating := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, RootCertConfigMap,
		errors.New("namespace going is being terminated"))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, RootCertConfigMap,
		errors.New("not allowed"))

	cases := []struct {
		name      string
		createErr error
		wantErr   bool
	}{
		{"namespace terminating", terminating, false},
		{"other refusal", forbidden, true},
		{"created", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset()
			creates := 0
			kube.PrependReactor("create", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
				creates++
				return tc.createErr != nil, nil, tc.createErr
			})
			namespaces := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			if err := namespaces.Add(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "going"}}); err != nil {
				t.Fatal(err)
			}
			p := NewRootCertPublisher(kube, []byte("root"), nil)
			p.namespaces = corelisters.NewNamespaceLister(namespaces)
			p.configMaps = corelisters.NewConfigMapLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc,
				cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}))

			err := p.sync(context.Background(), "going")
			if creates != 1 {
				t.Fatalf("%d creates, want 1", creates)
			}
			if (err != nil) != tc.wantErr {
				t.Errorf("sync: %v, want error %v", err, tc.wantErr)
			}
		})
	}
}
