package controllers

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apinetworking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func vsNames(store model.Store) map[string]*model.Config {
	out := map[string]*model.Config{}
	for _, c := range store.Configs(model.KindVirtualService) {
		out[c.Name] = c
	}
	return out
}

// vsToSubset routes every HTTP call of host to one subset of it.
func vsToSubset(host, subset string) apinetworking.VirtualService {
	return apinetworking.VirtualService{
		Hosts: []string{host},
		Http: []*apinetworking.HTTPRoute{{Route: []*apinetworking.HTTPRouteDestination{{
			Destination: &apinetworking.Destination{Host: host, Subset: subset},
		}}}},
	}
}

func TestIngesterVirtualServices(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: "demo", ResourceVersion: "7", Generation: 3,
			CreationTimestamp: created, Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "2"}}
	}
	store := model.NewStore()
	in := NewIngester(IngesterOptions{Store: store})

	// A DestinationRule of the same name must not be touched by anything a
	// VirtualService does.
	mustUpsert(t, in, &networkingv1.DestinationRule{ObjectMeta: meta("echo"), Spec: drSpec("echo")})
	v1 := &networkingv1.VirtualService{ObjectMeta: meta("echo"), Spec: vsToSubset("echo", "v2")}
	beta := &networkingv1beta1.VirtualService{ObjectMeta: meta("beta"), Spec: vsToSubset("beta", "v1")}
	alpha := &networkingv1alpha3.VirtualService{ObjectMeta: meta("alpha"), Spec: vsToSubset("alpha", "v1")}
	mustUpsert(t, in, v1, beta, alpha)

	got := vsNames(store)
	if len(got) != 3 {
		t.Fatalf("got %d VirtualServices, want 3: %v", len(got), got)
	}
	want := &model.Config{Kind: model.KindVirtualService, Name: "echo", Namespace: "demo",
		Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "2"},
		Revision: "7", Generation: 3, CreationTime: created.Time, Spec: &v1.Spec}
	// The spec is the object's own, not a copy.
	if diff := cmp.Diff(want, got["echo"], cmp.Comparer(func(a, b *apinetworking.VirtualService) bool { return a == b })); diff != "" {
		t.Errorf("v1 config (-want +got)\n%s", diff)
	}
	for name, obj := range map[string]*apinetworking.VirtualService{"beta": &beta.Spec, "alpha": &alpha.Spec} {
		if spec, ok := got[name].Spec.(*apinetworking.VirtualService); !ok || spec != obj {
			t.Errorf("%s config holds %T %p, want the object's *networking.VirtualService %p", name, got[name].Spec, got[name].Spec, obj)
		}
	}

	// An invalid update (a subset name that is no DNS label) withdraws the
	// stored version and leaves every other config alone.
	bad := &networkingv1.VirtualService{ObjectMeta: meta("echo"), Spec: vsToSubset("echo", "V_2")}
	err := in.Upsert(bad)
	var objErr *ObjectError
	if !errors.As(err, &objErr) || objErr.Reason != ReasonInvalid || objErr.Kind != "VirtualService" ||
		objErr.Namespace != "demo" || objErr.Name != "echo" {
		t.Fatalf("Upsert(invalid) = %v, want an invalid VirtualService ObjectError", err)
	}
	if got := vsNames(store); len(got) != 2 || got["echo"] != nil {
		t.Fatalf("after the invalid update, VirtualServices = %v, want beta and alpha", got)
	}
	if drNames(store)["echo"] == nil {
		t.Fatal("the DestinationRule of the same name went with the invalid VirtualService")
	}

	for _, obj := range []any{beta, alpha} {
		if err := in.Delete(obj); err != nil {
			t.Fatal(err)
		}
	}
	if got := vsNames(store); len(got) != 0 {
		t.Fatalf("VirtualServices left after delete: %v", got)
	}
	if drNames(store)["echo"] == nil {
		t.Fatal("deleting a VirtualService removed a DestinationRule")
	}
}
