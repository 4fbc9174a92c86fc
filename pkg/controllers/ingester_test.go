package controllers

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apinetworking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

var reviews = model.NamespacedName{Namespace: "ns", Name: "reviews"}

func testPod(name string, labels map[string]string, sa string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: labels},
		Spec:       corev1.PodSpec{ServiceAccountName: sa},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}}},
	}
}

func oneEndpointSlice(name, pod string) *discoveryv1.EndpointSlice {
	return testSlice(name, []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](8080)}},
		discoveryv1.Endpoint{Addresses: []string{"10.244.1.5"}, TargetRef: podRef(pod)})
}

// endpointView is what subset selection depends on.
type endpointView struct {
	Address, ServiceAccount string
	Labels                  map[string]string
}

func viewEndpoints(store model.Store, svc model.NamespacedName) []endpointView {
	var out []endpointView
	for _, e := range store.Endpoints(svc) {
		out = append(out, endpointView{Address: e.Address, ServiceAccount: e.ServiceAccount, Labels: e.Labels})
	}
	return out
}

func mustUpsert(t *testing.T, in *Ingester, objs ...any) {
	t.Helper()
	for _, o := range objs {
		if err := in.Upsert(o); err != nil {
			t.Fatalf("Upsert(%T): %v", o, err)
		}
	}
}

func TestIngesterPodResolution(t *testing.T) {
	v1 := map[string]string{"version": "v1"}
	v2 := map[string]string{"version": "v2"}
	cases := []struct {
		name  string
		steps func(t *testing.T, in *Ingester)
		want  []endpointView
	}{
		{
			name: "pod before slice",
			steps: func(t *testing.T, in *Ingester) {
				mustUpsert(t, in, testPod("p", v1, "sa"), oneEndpointSlice("s", "p"))
			},
			want: []endpointView{{Address: "10.244.1.5", ServiceAccount: "sa", Labels: v1}},
		},
		{
			name: "pod arrives after slice",
			steps: func(t *testing.T, in *Ingester) {
				mustUpsert(t, in, oneEndpointSlice("s", "p"), testPod("p", v1, "sa"))
			},
			want: []endpointView{{Address: "10.244.1.5", ServiceAccount: "sa", Labels: v1}},
		},
		{
			name: "pod labels change",
			steps: func(t *testing.T, in *Ingester) {
				mustUpsert(t, in, testPod("p", v1, "sa"), oneEndpointSlice("s", "p"), testPod("p", v2, "sa2"))
			},
			want: []endpointView{{Address: "10.244.1.5", ServiceAccount: "sa2", Labels: v2}},
		},
		{
			name: "pod deleted",
			steps: func(t *testing.T, in *Ingester) {
				mustUpsert(t, in, testPod("p", v1, "sa"), oneEndpointSlice("s", "p"))
				if err := in.Delete(testPod("p", nil, "")); err != nil {
					t.Fatal(err)
				}
			},
			want: []endpointView{{Address: "10.244.1.5"}},
		},
		{
			name: "finished pod counts as deleted",
			steps: func(t *testing.T, in *Ingester) {
				done := testPod("p", v1, "sa")
				done.Status.Phase = corev1.PodSucceeded
				mustUpsert(t, in, testPod("p", v1, "sa"), oneEndpointSlice("s", "p"), done)
			},
			want: []endpointView{{Address: "10.244.1.5"}},
		},
		{
			name: "slice no longer targets the pod",
			steps: func(t *testing.T, in *Ingester) {
				mustUpsert(t, in, testPod("p", v1, "sa"), oneEndpointSlice("s", "p"), oneEndpointSlice("s", "other"),
					testPod("p", v2, "sa"))
			},
			want: []endpointView{{Address: "10.244.1.5"}},
		},
		{
			name: "slice deleted",
			steps: func(t *testing.T, in *Ingester) {
				mustUpsert(t, in, oneEndpointSlice("s", "p"))
				if err := in.Delete(oneEndpointSlice("s", "p")); err != nil {
					t.Fatal(err)
				}
				mustUpsert(t, in, testPod("p", v1, "sa")) // must not resurrect the slice
			},
		},
		{
			name: "slice moves to another service",
			steps: func(t *testing.T, in *Ingester) {
				moved := oneEndpointSlice("s", "p")
				moved.Labels = map[string]string{discoveryv1.LabelServiceName: "ratings"}
				mustUpsert(t, in, oneEndpointSlice("s", "p"), moved)
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := model.NewStore()
			in := NewIngester(IngesterOptions{Store: store})
			tc.steps(t, in)
			if diff := cmp.Diff(tc.want, viewEndpoints(store, reviews)); diff != "" {
				t.Errorf("endpoints (-want +got)\n%s", diff)
			}
		})
	}
}

// An update pushes only what it changes: nothing when nothing meshpilot
// reads changed, endpoints alone when no proxy can see the change itself.
func TestIngesterPushesOnlyEffectiveChanges(t *testing.T) {
	labels := map[string]string{"app": "reviews"}
	service := func(edit func(*corev1.Service)) *corev1.Service {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "ns", ResourceVersion: "1"},
			Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 9080}}},
		}
		if edit != nil {
			svc.ResourceVersion = "2"
			edit(svc)
		}
		return svc
	}
	pending := testPod("p", labels, "sa")
	pending.Status = corev1.PodStatus{Phase: corev1.PodPending}
	ready := testPod("p", labels, "sa")
	ready.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	scheduled := testPod("p", labels, "sa")
	scheduled.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	svcKey := model.ConfigKey{Kind: model.KindService, Namespace: "ns", Name: "reviews"}
	epsKey := model.ConfigKey{Kind: model.KindEndpoints, Namespace: "ns", Name: "reviews"}
	podKey := model.ConfigKey{Kind: model.KindWorkload, Namespace: "ns", Name: "p"}
	cases := []struct {
		name           string
		before, update []any
		want           []model.ConfigKey
	}{
		{
			name:   "service annotation meshpilot does not read",
			before: []any{service(nil)},
			update: []any{service(func(s *corev1.Service) { s.Annotations = map[string]string{"example.com/owner": "team-a"} })},
		},
		{
			name:   "service exportTo",
			before: []any{service(nil)},
			update: []any{service(func(s *corev1.Service) { s.Annotations = map[string]string{annotationExportTo: "."} })},
			want:   []model.ConfigKey{svcKey},
		},
		{
			name:   "service publishNotReadyAddresses",
			before: []any{service(nil)},
			update: []any{service(func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true })},
			want:   []model.ConfigKey{svcKey},
		},
		{
			name:   "service internalTrafficPolicy Local",
			before: []any{service(nil)},
			update: []any{service(func(s *corev1.Service) {
				local := corev1.ServiceInternalTrafficPolicyLocal
				s.Spec.InternalTrafficPolicy = &local
			})},
			want: []model.ConfigKey{svcKey},
		},
		{
			name:   "service port added",
			before: []any{service(nil)},
			update: []any{service(func(s *corev1.Service) {
				s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "grpc", Port: 7070})
			})},
			want: []model.ConfigKey{svcKey},
		},
		{
			// Proxies resolve the name themselves: a new one is a change.
			name: "external name moved",
			before: []any{service(func(s *corev1.Service) {
				s.Spec.Type, s.Spec.ExternalName = corev1.ServiceTypeExternalName, "old.example.com"
			})},
			update: []any{service(func(s *corev1.Service) {
				s.Spec.Type, s.Spec.ExternalName = corev1.ServiceTypeExternalName, "new.example.com"
			})},
			want: []model.ConfigKey{svcKey},
		},
		{
			// Node proxies are sent a workload's readiness (WDS status);
			// its endpoints take theirs from the EndpointSlice.
			name:   "pod readiness reaches the workload, not its endpoints",
			before: []any{oneEndpointSlice("s", "p"), testPod("p", labels, "sa")},
			update: []any{ready},
			want:   []model.ConfigKey{podKey},
		},
		{
			name:   "pod status conditions other than Ready",
			before: []any{oneEndpointSlice("s", "p"), testPod("p", labels, "sa")},
			update: []any{scheduled},
		},
		{
			// No proxy runs in a Pod without an IP: only the endpoints
			// that target it learn its labels and service account.
			name:   "pending pod appears behind its endpoints",
			before: []any{oneEndpointSlice("s", "p")},
			update: []any{pending},
			want:   []model.ConfigKey{epsKey},
		},
		{
			name:   "running pod relabelled",
			before: []any{oneEndpointSlice("s", "p"), testPod("p", labels, "sa")},
			update: []any{testPod("p", map[string]string{"app": "reviews", "track": "canary"}, "sa")},
			want:   []model.ConfigKey{podKey, epsKey},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := model.NewStore()
			in := NewIngester(IngesterOptions{Store: store})
			mustUpsert(t, in, tc.before...)
			var got []model.ConfigKey
			store.OnChange(func(k model.ConfigKey) { got = append(got, k) })
			mustUpsert(t, in, tc.update...)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("store changes (-want +got)\n%s", diff)
			}
		})
	}
}

func drSpec(host string) apinetworking.DestinationRule {
	return apinetworking.DestinationRule{Host: host}
}

func TestIngesterDestinationRules(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "7", Generation: 3,
			CreationTimestamp: created, Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "2"}}
	}
	store := model.NewStore()
	in := NewIngester(IngesterOptions{Store: store})

	good := &networkingv1.DestinationRule{ObjectMeta: meta("good"), Spec: drSpec("reviews")}
	beta := &networkingv1beta1.DestinationRule{ObjectMeta: meta("beta"), Spec: drSpec("ratings")}
	mustUpsert(t, in, good, beta)
	got := store.Configs(model.KindDestinationRule)
	if len(got) != 2 {
		t.Fatalf("got %d configs, want 2", len(got))
	}
	want := &model.Config{Kind: model.KindDestinationRule, Name: "good", Namespace: "ns",
		Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "2"},
		Revision: "7", Generation: 3, CreationTime: created.Time, Spec: &good.Spec}
	if diff := cmp.Diff(want, got[1], cmp.Comparer(func(a, b *apinetworking.DestinationRule) bool { return a == b })); diff != "" {
		t.Errorf("v1 config (-want +got)\n%s", diff)
	}
	if got[0].Name != "beta" || got[0].Spec.(*apinetworking.DestinationRule).GetHost() != "ratings" {
		t.Errorf("v1beta1 config not converted: %+v", got[0])
	}

	// An invalid update removes the stored version and leaves others alone.
	bad := &networkingv1.DestinationRule{ObjectMeta: meta("good"), Spec: drSpec("")}
	err := in.Upsert(bad)
	var objErr *ObjectError
	if !errors.As(err, &objErr) || objErr.Reason != ReasonInvalid || objErr.Name != "good" {
		t.Fatalf("Upsert(invalid) = %v, want an invalid ObjectError", err)
	}
	got = store.Configs(model.KindDestinationRule)
	if len(got) != 1 || got[0].Name != "beta" {
		t.Fatalf("after invalid update, configs = %v, want only beta", got)
	}

	if err := in.Delete(beta); err != nil {
		t.Fatal(err)
	}
	if n := len(store.Configs(model.KindDestinationRule)); n != 0 {
		t.Fatalf("%d configs left after delete", n)
	}
}

func TestIngesterRejectsUnknownTypes(t *testing.T) {
	in := NewIngester(IngesterOptions{Store: model.NewStore()})
	for _, op := range []func(any) error{in.Upsert, in.Delete} {
		var objErr *ObjectError
		if err := op(&corev1.ConfigMap{}); !errors.As(err, &objErr) || objErr.Reason != ReasonUnknownKind {
			t.Errorf("got %v, want an unknown-kind error", err)
		}
	}
}

func TestIngesterServicesAndNamespaces(t *testing.T) {
	store := model.NewStore()
	in := NewIngester(IngesterOptions{Store: store, DomainSuffix: "corp.local"})
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "ns"}}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{"istio-injection": "enabled"}}}
	mustUpsert(t, in, svc, ns)
	if got := store.Service(reviews); got == nil || got.Hostname != "reviews.ns.svc.corp.local" {
		t.Fatalf("service = %+v", got)
	}
	if diff := cmp.Diff([]*model.Namespace{{Name: "ns", Labels: ns.Labels}}, store.Namespaces()); diff != "" {
		t.Fatalf("namespaces (-want +got)\n%s", diff)
	}
	if err := in.Delete(svc); err != nil {
		t.Fatal(err)
	}
	if err := in.Delete(ns); err != nil {
		t.Fatal(err)
	}
	if store.Service(reviews) != nil || len(store.Namespaces()) != 0 {
		t.Fatal("delete left objects behind")
	}
}
