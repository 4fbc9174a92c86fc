package loadtest

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshpilot/meshpilot/internal/kubetest"
)

// requestLog records the method of every request a clientset sends.
type requestLog struct {
	mu      sync.Mutex
	methods []string
	next    http.RoundTripper
}

func (l *requestLog) RoundTrip(r *http.Request) (*http.Response, error) {
	l.mu.Lock()
	l.methods = append(l.methods, r.Method)
	l.mu.Unlock()
	return l.next.RoundTrip(r)
}

func (l *requestLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.methods
	l.methods = nil
	return m
}

// TestKubeEndpointChurnWritesOnce checks, on a real API server, that an
// endpoint change is the one request the endpoint phase times (an update,
// as the EndpointSlice controller sends), and that a slice someone else
// wrote in between is still updated.
func TestKubeEndpointChurnWritesOnce(t *testing.T) {
	env := kubetest.Start(t)
	ctx := context.Background()
	log := &requestLog{}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { log.next = rt; return log })
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	scn := Scenario{Services: 2, Endpoints: 2, Namespaces: 1, Domain: "cluster.local"}
	in := &KubeInputs{Scenario: scn, Kube: kube, Istio: env.Istio}
	if err := in.Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	firstAddress := func() string {
		t.Helper()
		want := scn.slice(0, 0)
		sl, err := env.Kube.DiscoveryV1().EndpointSlices(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sl.Endpoints[0].Addresses[0]
	}

	cases := []struct {
		name         string
		outsideWrite bool
		wantRequests []string
	}{
		{"after the tool's own create", false, []string{http.MethodPut}},
		{"after the tool's own update", false, []string{http.MethodPut}},
		{"after someone else's update", true, []string{http.MethodPut, http.MethodGet, http.MethodPut}},
		{"after the recovery", false, []string{http.MethodPut}},
	}
	for gen, tc := range cases {
		gen++
		t.Run(tc.name, func(t *testing.T) {
			if tc.outsideWrite {
				want := scn.slice(0, 0)
				client := env.Kube.DiscoveryV1().EndpointSlices(want.Namespace)
				sl, err := client.Get(ctx, want.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				sl.Labels["outside"] = "writer"
				if _, err := client.Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			log.take()
			if err := in.SetEndpoints(ctx, 0, gen); err != nil {
				t.Fatal(err)
			}
			if got := log.take(); !slices.Equal(got, tc.wantRequests) {
				t.Errorf("requests %v, want %v", got, tc.wantRequests)
			}
			if got, want := firstAddress(), MarkerAddr(gen); got != want {
				t.Errorf("first address %s, want %s", got, want)
			}
		})
	}
}
