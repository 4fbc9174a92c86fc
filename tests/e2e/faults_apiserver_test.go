package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/xdstest"
)

// churnServices is how many Services the API-server restart test changes.
const churnServices = 4

// TestAPIServerRestartDuringChurn stops etcd and kube-apiserver in the middle
// of endpoint churn and starts them again on the same data and port. The
// informers must resume, and every client must end up with exactly the
// endpoints the API server holds when the churn stops, in both ADS variants
// and for grpc-go. How long that takes is reported, not asserted: the
// deadline only bounds a broken test.
func TestAPIServerRestartDuringChurn(t *testing.T) {
	env := kubetest.Start(t)
	m := kubeMeshOn(t, env)
	ctx := context.Background()
	ns := env.Namespace(t, "churn")
	for _, name := range []string{"istio-system"} {
		if _, err := env.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range churnServices {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%d", i), Namespace: ns},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: 7070}}},
		}
		if _, err := env.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := env.Kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, churnSlice(ns, i, 0), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cp := startControlPlane(t, m)

	node := envoyNodeIn(ns, "web", "10.244.0.5")
	envoys := []*xdstest.EnvoyClient{
		xdstest.DialEnvoyClient(t, cp.xdsAddr, node, xdstest.SotW),
		xdstest.DialEnvoyClient(t, cp.xdsAddr, envoyNodeIn(ns, "web-delta", "10.244.0.6"), xdstest.Delta),
	}
	grpcID := proxylessClient(t, cp.xdsAddr, ns, fmt.Sprintf("svc-0.%s.svc.cluster.local", ns))
	for _, c := range envoys {
		c.RequireWarm(warmBound, func(s xdstest.Snapshot) error {
			if len(s.Endpoints) < churnServices {
				return fmt.Errorf("%d load assignments", len(s.Endpoints))
			}
			return nil
		})
	}

	// The churn: each round rewrites one Service's slice. Writes that fail
	// while the API server is down are dropped; the final state is whatever
	// the API server holds afterwards.
	var (
		stop            = make(chan struct{})
		wg              sync.WaitGroup
		written, failed atomic.Int64
	)
	wg.Go(func() {
		for round := 1; ; round++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			i := round % churnServices
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := env.Kube.DiscoveryV1().EndpointSlices(ns).Update(wctx, churnSlice(ns, i, round), metav1.UpdateOptions{})
			cancel()
			if err != nil {
				failed.Add(1)
				continue
			}
			written.Add(1)
		}
	})
	time.Sleep(2 * time.Second)
	env.Restart(t, func() { time.Sleep(2 * time.Second) })
	close(stop)
	wg.Wait()
	// Right after the restart, one last write per Service: how soon clients
	// see these measures how soon the informers resume (the reflector's
	// backoff), which the churn before would hide.
	for i := range churnServices {
		waitFor(t, 30*time.Second, "a write after the restart", func() error {
			_, err := env.Kube.DiscoveryV1().EndpointSlices(ns).Update(ctx, churnSlice(ns, i, 1000+i), metav1.UpdateOptions{})
			return err
		})
	}
	lastWrite := time.Now()
	if failed.Load() == 0 || written.Load() == 0 {
		t.Fatalf("%d writes succeeded and %d failed: the churn did not straddle the restart", written.Load(), failed.Load())
	}

	// The truth: the API server's EndpointSlices once the churn is over.
	want := map[string][]string{}
	slices_, err := env.Kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slices_.Items {
		host := fmt.Sprintf("%s.%s.svc.cluster.local", s.Labels[discoveryv1.LabelServiceName], ns)
		for _, ep := range s.Endpoints {
			want[host] = append(want[host], ep.Addresses...)
		}
		slices.Sort(want[host])
	}
	if len(want) != churnServices {
		t.Fatalf("the API server holds slices for %d Services, want %d", len(want), churnServices)
	}

	converged := func(eds map[string]*endpointv3.ClusterLoadAssignment) error {
		for host, addrs := range want {
			cla := eds["outbound|7070||"+host]
			if got := claAddresses(cla); !slices.Equal(got, addrs) {
				return fmt.Errorf("%s: %v, the API server has %v", host, got, addrs)
			}
		}
		return nil
	}
	for _, c := range envoys {
		c.RequireWarm(90*time.Second, func(s xdstest.Snapshot) error { return converged(s.Endpoints) })
	}
	waitFor(t, 90*time.Second, "the grpc-go client's EDS to match the API server", func() error {
		if err := allAcked(t, cp, grpcID, 1, 4); err != nil {
			return err
		}
		eds, err := sentLoadAssignments(t, cp, grpcID)
		if err != nil {
			return err
		}
		host := fmt.Sprintf("svc-0.%s.svc.cluster.local", ns)
		if got := claAddresses(eds["outbound|7070||"+host]); !slices.Equal(got, want[host]) {
			return fmt.Errorf("%s: %v, the API server has %v", host, got, want[host])
		}
		return nil
	})
	t.Logf("%d writes, %d failed while the API server was down; every client converged %v after the last write",
		written.Load(), failed.Load(), time.Since(lastWrite).Round(time.Millisecond))
}

// churnSlice is Service i's EndpointSlice at a given round: one to three
// documentation-range addresses that change every round.
func churnSlice(ns string, i, round int) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%d", i), Namespace: ns,
			Labels: map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("svc-%d", i)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](7070)}},
	}
	for k := range 1 + round%3 {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("192.0.2.%d", 1+(round*3+k)%250)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		})
	}
	return s
}

func claAddresses(cla *endpointv3.ClusterLoadAssignment) []string {
	var out []string
	for _, g := range cla.GetEndpoints() {
		for _, lb := range g.GetLbEndpoints() {
			out = append(out, lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		}
	}
	slices.Sort(out)
	return out
}

// sentLoadAssignments reads from /debug/config_dump the load assignments a
// proxy was last sent.
func sentLoadAssignments(t *testing.T, cp *controlPlane, proxyID string) (map[string]*endpointv3.ClusterLoadAssignment, error) {
	t.Helper()
	code, body := cp.get(t, "/debug/config_dump?format=meshpilot&proxyID="+url.QueryEscape(proxyID))
	if code != http.StatusOK {
		return nil, fmt.Errorf("config_dump: %d %s", code, body)
	}
	var dump struct {
		Types []struct {
			TypeURL   string `json:"typeURL"`
			Resources []struct {
				Name     string          `json:"name"`
				Resource json.RawMessage `json:"resource"`
			} `json:"resources"`
		} `json:"types"`
	}
	if err := json.Unmarshal([]byte(body), &dump); err != nil {
		return nil, err
	}
	out := map[string]*endpointv3.ClusterLoadAssignment{}
	for _, ty := range dump.Types {
		if ty.TypeURL != "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment" {
			continue
		}
		for _, r := range ty.Resources {
			a := &anypb.Any{}
			if err := protojson.Unmarshal(r.Resource, a); err != nil {
				return nil, fmt.Errorf("%s: %w", r.Name, err)
			}
			cla := &endpointv3.ClusterLoadAssignment{}
			if err := a.UnmarshalTo(cla); err != nil {
				return nil, fmt.Errorf("%s: %w", r.Name, err)
			}
			out[r.Name] = cla
		}
	}
	return out, nil
}
