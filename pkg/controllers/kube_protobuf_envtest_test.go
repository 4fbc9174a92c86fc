package controllers

import (
	"context"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// contentTypes records, per request method, the content types that a
// client sent and was answered with for collections of the built-in kinds
// the Kubernetes source watches (not discovery, which has its own).
type contentTypes struct {
	mu       sync.Mutex
	sent     map[string][]string
	answered map[string][]string
}

var watchedCollections = []string{"services", "endpointslices", "pods", "namespaces", "ingresses", "ingressclasses", "secrets"}

func (c *contentTypes) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if !slices.Contains(watchedCollections, path.Base(req.URL.Path)) {
			return resp, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if ct := req.Header.Get("Content-Type"); ct != "" {
			c.sent[req.Method] = append(c.sent[req.Method], ct)
		}
		if err == nil {
			c.answered[req.Method] = append(c.answered[req.Method], resp.Header.Get("Content-Type"))
		}
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestBuiltinKindsSpeakProtobuf runs the Kubernetes source on a clientset
// built from BuiltinKindsConfig against a real API server: its writes, lists
// and watches must all be protobuf, and the objects must arrive intact.
func TestBuiltinKindsSpeakProtobuf(t *testing.T) {
	t.Parallel()
	env := kubetest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	ns := env.Namespace(t, "protobuf")
	types := &contentTypes{sent: map[string][]string{}, answered: map[string][]string{}}
	base := *env.Config
	base.Wrap(types.wrap)
	kube, err := kubernetes.NewForConfig(BuiltinKindsConfig(&base))
	if err != nil {
		t.Fatal(err)
	}
	if base.ContentType != "" {
		t.Fatalf("BuiltinKindsConfig changed the config it was given: content type %q", base.ContentType)
	}

	store := model.NewStore()
	src, err := NewKubeSource(KubeSourceOptions{Client: kube, IstioClient: env.Istio, Store: store,
		DomainSuffix: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	runSynced(ctx, cancel, t, src, "sync")
	if _, err := kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews", Labels: map[string]string{"team": "books"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "reviews"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 9080}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "reviews-a", Labels: map[string]string{discoveryv1.LabelServiceName: "reviews"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](9080)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.5"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	key := model.NamespacedName{Namespace: ns, Name: "reviews"}
	eventually(t, "service and its endpoint through the watches", func() bool {
		svc := store.Service(key)
		eps := store.Endpoints(key)
		return svc != nil && svc.Labels["team"] == "books" && len(eps) == 1 && eps[0].Address == "10.244.1.5"
	})

	types.mu.Lock()
	defer types.mu.Unlock()
	for _, method := range []string{http.MethodPost} {
		if len(types.sent[method]) == 0 {
			t.Errorf("no %s sent", method)
		}
		for _, ct := range types.sent[method] {
			if ct != runtime.ContentTypeProtobuf {
				t.Errorf("%s sent as %q, want %q", method, ct, runtime.ContentTypeProtobuf)
			}
		}
	}
	// Lists and watches (GETs), and the answers to the writes.
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		if len(types.answered[method]) == 0 {
			t.Errorf("no answer to a %s", method)
		}
		for _, ct := range types.answered[method] {
			if !strings.HasPrefix(ct, runtime.ContentTypeProtobuf) {
				t.Errorf("%s answered with %q, want %s", method, ct, runtime.ContentTypeProtobuf)
			}
		}
	}
}
