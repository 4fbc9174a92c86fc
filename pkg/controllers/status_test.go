package controllers

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func lbIP(ip string) model.LoadBalancerIngress     { return model.LoadBalancerIngress{IP: ip} }
func lbHost(host string) model.LoadBalancerIngress { return model.LoadBalancerIngress{Hostname: host} }
func apiIP(ip string) networkingv1.IngressLoadBalancerIngress {
	return networkingv1.IngressLoadBalancerIngress{IP: ip}
}

func TestGatewayAddresses(t *testing.T) {
	cases := []struct {
		name string
		svc  *model.Service
		want []model.LoadBalancerIngress
	}{
		{name: "no service"},
		{name: "service without addresses", svc: &model.Service{Name: "gw"}},
		{
			name: "load balancer IPs and hostnames, sorted, without repeats or blanks",
			svc: &model.Service{
				LoadBalancer: []model.LoadBalancerIngress{lbIP("10.0.0.9"), lbHost("lb.example.com"), {},
					lbIP("10.0.0.1"), lbIP("10.0.0.9")},
			},
			want: []model.LoadBalancerIngress{lbHost("lb.example.com"), lbIP("10.0.0.1"), lbIP("10.0.0.9")},
		},
		{
			name: "external IPs",
			svc:  &model.Service{ExternalIPs: []string{"192.0.2.2", "192.0.2.1"}},
			want: []model.LoadBalancerIngress{lbIP("192.0.2.1"), lbIP("192.0.2.2")},
		},
		{
			// Both reach the gateway, and Istio lists both.
			name: "load balancer addresses and external IPs together",
			svc: &model.Service{
				LoadBalancer: []model.LoadBalancerIngress{lbIP("10.0.0.9"), lbHost("lb.example.com")},
				ExternalIPs:  []string{"192.0.2.1", "10.0.0.9"},
			},
			want: []model.LoadBalancerIngress{lbHost("lb.example.com"), lbIP("10.0.0.9"), lbIP("192.0.2.1")},
		},
		{
			name: "an ExternalName gateway Service: its name",
			svc:  &model.Service{ExternalName: "gateway.example.com.", ExternalIPs: []string{"192.0.2.1"}},
			want: []model.LoadBalancerIngress{lbHost("gateway.example.com")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, gatewayAddresses(tc.svc)); diff != "" {
				t.Errorf("addresses (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNextStatus(t *testing.T) {
	gateway := []model.LoadBalancerIngress{lbIP("10.0.0.1"), lbIP("10.0.0.2")}
	cases := []struct {
		name        string
		current     []networkingv1.IngressLoadBalancerIngress
		gateway     []model.LoadBalancerIngress
		ours        []model.LoadBalancerIngress // the gateway's and those remembered
		owned       bool
		want        []networkingv1.IngressLoadBalancerIngress
		wantChanged bool
	}{
		{name: "owned, empty status", gateway: gateway, owned: true,
			want: []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.1"), apiIP("10.0.0.2")}, wantChanged: true},
		{name: "owned, same addresses in another order",
			current: []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.2"), apiIP("10.0.0.1")},
			gateway: gateway, owned: true,
			want: []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.2"), apiIP("10.0.0.1")}},
		{name: "owned, stale address replaced",
			current: []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.1"), apiIP("10.9.9.9")},
			gateway: gateway, owned: true,
			want: []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.1"), apiIP("10.0.0.2")}, wantChanged: true},
		{name: "owned, gateway lost its addresses",
			current: []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.1")}, owned: true,
			want: []networkingv1.IngressLoadBalancerIngress{}, wantChanged: true},
		{name: "owned, nothing anywhere", owned: true},
		{name: "not owned, our addresses removed, another controller's kept",
			current: []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.1"), apiIP("203.0.113.7"), apiIP("10.0.0.2")},
			gateway: gateway, ours: gateway,
			want: []networkingv1.IngressLoadBalancerIngress{apiIP("203.0.113.7")}, wantChanged: true},
		{name: "not owned, an address the gateway had before removed too",
			current: []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.9"), apiIP("203.0.113.7")},
			gateway: gateway, ours: append([]model.LoadBalancerIngress{lbIP("10.0.0.9")}, gateway...),
			want: []networkingv1.IngressLoadBalancerIngress{apiIP("203.0.113.7")}, wantChanged: true},
		{name: "not owned, only another controller's addresses",
			current: []networkingv1.IngressLoadBalancerIngress{apiIP("203.0.113.7")},
			gateway: gateway, ours: gateway,
			want: []networkingv1.IngressLoadBalancerIngress{apiIP("203.0.113.7")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, changed := nextStatus(tc.current, tc.gateway, tc.ours, tc.owned)
			if changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

// statusFixture is a writer over a fake clientset and a store holding the
// gateway Service, an istio IngressClass and one Ingress in both.
type statusFixture struct {
	client  *kubefake.Clientset
	store   model.Store
	metrics *IngressStatusMetrics
	writer  *IngressStatusWriter
	key     model.NamespacedName
}

func newStatusFixture(t *testing.T, className string, current ...networkingv1.IngressLoadBalancerIngress) *statusFixture {
	t.Helper()
	f := &statusFixture{
		client:  kubefake.NewClientset(),
		store:   model.NewStore(),
		metrics: NewIngressStatusMetrics(prometheus.NewRegistry()),
		key:     model.NamespacedName{Namespace: "shop", Name: "web"},
	}
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec:       networkingv1.IngressSpec{IngressClassName: &className},
		Status:     networkingv1.IngressStatus{LoadBalancer: networkingv1.IngressLoadBalancerStatus{Ingress: current}},
	}
	if _, err := f.client.NetworkingV1().Ingresses("shop").Create(context.Background(), ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.store.UpsertIngressClass(&model.IngressClass{Name: "istio", Controller: model.IngressController})
	f.store.UpsertIngressClass(&model.IngressClass{Name: "nginx", Controller: "k8s.io/ingress-nginx"})
	f.store.UpsertService(&model.Service{Namespace: "istio-system", Name: "istio-ingressgateway",
		LoadBalancer: []model.LoadBalancerIngress{lbIP("10.0.0.1")}})
	f.store.UpsertIngress(ConvertIngress(ing))
	w, err := NewIngressStatusWriter(IngressStatusOptions{Client: f.client, Store: f.store, Metrics: f.metrics,
		Ownership: model.IngressOwnership{Class: "istio", Mode: model.IngressModeStrict}})
	if err != nil {
		t.Fatal(err)
	}
	f.writer = w
	f.client.ClearActions()
	return f
}

func (f *statusFixture) status(t *testing.T) []networkingv1.IngressLoadBalancerIngress {
	t.Helper()
	ing, err := f.client.NetworkingV1().Ingresses("shop").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ing.Status.LoadBalancer.Ingress
}

func (f *statusFixture) verbs() []string {
	var out []string
	for _, a := range f.client.Actions() {
		v := a.GetVerb()
		if a.GetSubresource() != "" {
			v += "/" + a.GetSubresource()
		}
		out = append(out, v)
	}
	return out
}

func (f *statusFixture) writes(t *testing.T, result string) float64 {
	return counterValue(t, f.metrics.StatusWrites.WithLabelValues(result))
}

func TestIngressStatusReconcile(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name      string
		class     string
		current   []networkingv1.IngressLoadBalancerIngress
		want      []networkingv1.IngressLoadBalancerIngress
		wantVerbs []string
		result    string
	}{
		{name: "owned ingress gets the gateway address", class: "istio",
			want:      []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.1")},
			wantVerbs: []string{"get", "update/status"}, result: StatusUpdated},
		{name: "unchanged status costs no API call", class: "istio",
			current: []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.1")},
			want:    []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.1")}, result: StatusUnchanged},
		{name: "another controller's ingress loses only our address", class: "nginx",
			current:   []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.1"), apiIP("203.0.113.7")},
			want:      []networkingv1.IngressLoadBalancerIngress{apiIP("203.0.113.7")},
			wantVerbs: []string{"get", "update/status"}, result: StatusUpdated},
		{name: "another controller's ingress is left alone", class: "nginx",
			current: []networkingv1.IngressLoadBalancerIngress{apiIP("203.0.113.7")},
			want:    []networkingv1.IngressLoadBalancerIngress{apiIP("203.0.113.7")}, result: StatusUnchanged},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newStatusFixture(t, tc.class, tc.current...)
			if err := f.writer.reconcile(ctx, f.key); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantVerbs, f.verbs()); diff != "" {
				t.Errorf("API calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, f.status(t)); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if got := f.writes(t, tc.result); got != 1 {
				t.Errorf("%s count = %v, want 1", tc.result, got)
			}
		})
	}
}

func TestIngressStatusReconcileStaleStore(t *testing.T) {
	// The store still shows no status, but the object already has the
	// right one (our earlier write, not yet seen by the informer): the
	// writer re-reads and does not write again.
	f := newStatusFixture(t, "istio")
	ing, err := f.client.NetworkingV1().Ingresses("shop").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ing.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.1")}
	if _, err := f.client.NetworkingV1().Ingresses("shop").UpdateStatus(context.Background(), ing, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.client.ClearActions()
	if err := f.writer.reconcile(context.Background(), f.key); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"get"}, f.verbs()); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
	if got := f.writes(t, StatusUnchanged); got != 1 {
		t.Errorf("unchanged count = %v, want 1", got)
	}
}

// TestIngressStatusReconcileStaleOwnership: the store still shows the
// Ingress as ours, but it has already moved to another controller, which
// wrote its own address. A reconcile made before the store catches up (a
// gateway change reconciles every Ingress) must judge ownership from the
// object it re-read, not overwrite the other controller's status.
func TestIngressStatusReconcileStaleOwnership(t *testing.T) {
	f := newStatusFixture(t, "istio")
	ings := f.client.NetworkingV1().Ingresses("shop")
	ing, err := ings.Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ing.Spec.IngressClassName = ptr("nginx")
	if ing, err = ings.Update(context.Background(), ing, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ing.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{apiIP("203.0.113.7")}
	if _, err := ings.UpdateStatus(context.Background(), ing, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.client.ClearActions()
	if err := f.writer.reconcile(context.Background(), f.key); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"get"}, f.verbs()); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]networkingv1.IngressLoadBalancerIngress{apiIP("203.0.113.7")}, f.status(t)); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
}

func TestIngressStatusReconcileConflict(t *testing.T) {
	f := newStatusFixture(t, "istio")
	conflicts := 2
	f.client.PrependReactor("update", "ingresses", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "status" || conflicts == 0 {
			return false, nil, nil
		}
		conflicts--
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "networking.k8s.io", Resource: "ingresses"},
			"web", nil)
	})
	if err := f.writer.reconcile(context.Background(), f.key); err != nil {
		t.Fatal(err)
	}
	want := []string{"get", "update/status", "get", "update/status", "get", "update/status"}
	if diff := cmp.Diff(want, f.verbs()); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.1")}, f.status(t)); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if got := f.writes(t, StatusConflict); got != 2 {
		t.Errorf("conflicts = %v, want 2", got)
	}
	if got := f.writes(t, StatusUpdated); got != 1 {
		t.Errorf("updates = %v, want 1", got)
	}
}

func TestIngressStatusReconcileDeleted(t *testing.T) {
	f := newStatusFixture(t, "istio")
	// Deleted from the API server but not yet from the store.
	if err := f.client.NetworkingV1().Ingresses("shop").Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.writer.reconcile(context.Background(), f.key); err != nil {
		t.Errorf("reconcile of a deleted ingress: %v", err)
	}
	// Deleted from the store too: nothing is read.
	f.store.DeleteIngress(f.key)
	f.client.ClearActions()
	if err := f.writer.reconcile(context.Background(), f.key); err != nil {
		t.Fatal(err)
	}
	if got := f.verbs(); len(got) != 0 {
		t.Errorf("API calls for an ingress gone from the store: %v", got)
	}
}

// TestIngressStatusWriterFollowsStore runs the writer's queue: the first
// pass writes every owned Ingress, and a gateway change rewrites them.
func TestIngressStatusWriterFollowsStore(t *testing.T) {
	f := newStatusFixture(t, "istio")
	synced := make(chan struct{})
	f.writer.opts.Synced = synced
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		f.writer.Run(ctx)
		close(done)
	}()
	defer func() {
		cancel()
		<-done
	}()
	time.Sleep(200 * time.Millisecond) // time for a writer that did not wait to call the API
	if got := f.verbs(); len(got) != 0 {
		t.Fatalf("API calls before the store synced: %v", got)
	}
	close(synced)
	eventually(t, "first write", func() bool {
		return cmp.Equal(f.status(t), []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.1")})
	})

	f.store.UpsertService(&model.Service{Namespace: "istio-system", Name: "istio-ingressgateway",
		ExternalIPs: []string{"192.0.2.10"}})
	eventually(t, "gateway change", func() bool {
		return cmp.Equal(f.status(t), []networkingv1.IngressLoadBalancerIngress{apiIP("192.0.2.10")})
	})
}

// TestIngressStatusWriterFollowsSetTarget: when the mesh config names
// another gateway Service, the running writer moves every owned Ingress to
// its addresses, and from then on follows that Service's changes, not the
// old one's.
func TestIngressStatusWriterFollowsSetTarget(t *testing.T) {
	f := newStatusFixture(t, "istio")
	f.store.UpsertService(&model.Service{Namespace: "gw", Name: "edge", LoadBalancer: []model.LoadBalancerIngress{lbIP("10.0.0.2")}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		f.writer.Run(ctx)
		close(done)
	}()
	defer func() {
		cancel()
		<-done
	}()
	eventually(t, "the first write, from the configured gateway", func() bool {
		return cmp.Equal(f.status(t), []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.1")})
	})
	f.writer.SetTarget(model.IngressOwnership{Class: "istio", Mode: model.IngressModeStrict},
		model.NamespacedName{Namespace: "gw", Name: "edge"})
	eventually(t, "the new gateway's address", func() bool {
		return cmp.Equal(f.status(t), []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.2")})
	})
	f.store.UpsertService(&model.Service{Namespace: "gw", Name: "edge", LoadBalancer: []model.LoadBalancerIngress{lbIP("10.0.0.3")}})
	eventually(t, "the new gateway Service's change", func() bool {
		return cmp.Equal(f.status(t), []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.3")})
	})
}

// TestIngressStatusWriterFollowsStatusChange: a change of an owned
// Ingress's status alone (another party overwrote it) reaches the store as
// a status change, which pushes nothing but still makes the writer put the
// gateway's addresses back.
func TestIngressStatusWriterFollowsStatusChange(t *testing.T) {
	f := newStatusFixture(t, "istio")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		f.writer.Run(ctx)
		close(done)
	}()
	defer func() {
		cancel()
		<-done
	}()
	ours := []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.1")}
	eventually(t, "first write", func() bool { return cmp.Equal(f.status(t), ours) })

	ings := f.client.NetworkingV1().Ingresses("shop")
	ing, err := ings.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ing.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{apiIP("203.0.113.7")}
	if ing, err = ings.UpdateStatus(ctx, ing, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := NewIngester(IngesterOptions{Store: f.store}).Upsert(ing); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the gateway's address back", func() bool { return cmp.Equal(f.status(t), ours) })
}

// TestIngressStatusReconcileNoLongerOwned: an Ingress that moves to another
// controller loses the addresses the writer put there, even those the
// gateway no longer has (its address changed, or mesh config switched the
// gateway Service, before the writer saw the move), and keeps the rest.
func TestIngressStatusReconcileNoLongerOwned(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		// ownedFirst: the writer reconciles the Ingress while it is ours
		// (and the gateway at 10.0.0.1) before the move.
		ownedFirst bool
		// other is what the other controller added once the Ingress moved.
		other []networkingv1.IngressLoadBalancerIngress
		// initial is the status when the fixture starts.
		initial []networkingv1.IngressLoadBalancerIngress
		want    []networkingv1.IngressLoadBalancerIngress
	}{
		{name: "the address written before the gateway's changed is removed", ownedFirst: true,
			want: []networkingv1.IngressLoadBalancerIngress{}},
		{name: "an address found right while ours is removed too", ownedFirst: true,
			initial: []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.1")},
			want:    []networkingv1.IngressLoadBalancerIngress{}},
		{name: "another controller's address is kept", ownedFirst: true,
			other: []networkingv1.IngressLoadBalancerIngress{apiIP("203.0.113.7")},
			want:  []networkingv1.IngressLoadBalancerIngress{apiIP("203.0.113.7")}},
		// Written by another process (before a restart): it cannot be told
		// from another controller's address, so it stays.
		{name: "an address this writer never saw as ours is kept",
			initial: []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.1")},
			want:    []networkingv1.IngressLoadBalancerIngress{apiIP("10.0.0.1")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newStatusFixture(t, "istio", tc.initial...)
			in := NewIngester(IngesterOptions{Store: f.store})
			ings := f.client.NetworkingV1().Ingresses("shop")
			if tc.ownedFirst {
				if err := f.writer.reconcile(ctx, f.key); err != nil {
					t.Fatal(err)
				}
			}
			// Both change before the writer reconciles again.
			f.store.UpsertService(&model.Service{Namespace: "istio-system", Name: "istio-ingressgateway",
				LoadBalancer: []model.LoadBalancerIngress{lbIP("10.0.0.2")}})
			ing, err := ings.Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ing.Spec.IngressClassName = ptr("nginx")
			if ing, err = ings.Update(ctx, ing, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if tc.other != nil {
				ing.Status.LoadBalancer.Ingress = append(ing.Status.LoadBalancer.Ingress, tc.other...)
				if ing, err = ings.UpdateStatus(ctx, ing, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if err := in.Upsert(ing); err != nil {
				t.Fatal(err)
			}
			if err := f.writer.reconcile(ctx, f.key); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, f.status(t)); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}
