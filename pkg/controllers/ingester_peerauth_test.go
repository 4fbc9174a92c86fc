package controllers

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apisecurity "istio.io/api/security/v1beta1"
	apitype "istio.io/api/type/v1beta1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	securityv1beta1 "istio.io/client-go/pkg/apis/security/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func paNames(store model.Store) map[string]*model.Config {
	out := map[string]*model.Config{}
	for _, c := range store.Configs(model.KindPeerAuthentication) {
		out[c.Name] = c
	}
	return out
}

func TestIngesterPeerAuthentications(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "7", Generation: 3,
			CreationTimestamp: created, Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "2"}}
	}
	strict := &apisecurity.PeerAuthentication_MutualTLS{Mode: apisecurity.PeerAuthentication_MutualTLS_STRICT}
	store := model.NewStore()
	in := NewIngester(IngesterOptions{Store: store})

	// A DestinationRule of the same name must not be touched by anything a
	// PeerAuthentication does.
	mustUpsert(t, in, &networkingv1.DestinationRule{ObjectMeta: meta("workload"), Spec: drSpec("reviews")})
	workload := &securityv1.PeerAuthentication{ObjectMeta: meta("workload"), Spec: apisecurity.PeerAuthentication{
		Selector: &apitype.WorkloadSelector{MatchLabels: map[string]string{"app": "reviews"}},
		Mtls:     strict,
		PortLevelMtls: map[uint32]*apisecurity.PeerAuthentication_MutualTLS{
			8080: {Mode: apisecurity.PeerAuthentication_MutualTLS_DISABLE}},
	}}
	beta := &securityv1beta1.PeerAuthentication{ObjectMeta: meta("namespace-wide"), Spec: apisecurity.PeerAuthentication{Mtls: strict}}
	mustUpsert(t, in, workload, beta)

	got := paNames(store)
	if len(got) != 2 {
		t.Fatalf("got %d PeerAuthentications, want 2: %v", len(got), got)
	}
	want := &model.Config{Kind: model.KindPeerAuthentication, Name: "workload", Namespace: "ns",
		Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "2"},
		Revision: "7", Generation: 3, CreationTime: created.Time, Spec: &workload.Spec}
	// The spec is the object's own, not a copy.
	if diff := cmp.Diff(want, got["workload"], cmp.Comparer(func(a, b *apisecurity.PeerAuthentication) bool { return a == b })); diff != "" {
		t.Errorf("v1 config (-want +got)\n%s", diff)
	}
	if spec, ok := got["namespace-wide"].Spec.(*apisecurity.PeerAuthentication); !ok ||
		spec.GetMtls().GetMode() != apisecurity.PeerAuthentication_MutualTLS_STRICT || spec.GetSelector() != nil {
		t.Errorf("v1beta1 config not converted: %+v", got["namespace-wide"])
	}

	// An invalid update (port-level mTLS without a selector) withdraws the
	// stored version and leaves every other config alone.
	bad := &securityv1.PeerAuthentication{ObjectMeta: meta("workload"), Spec: apisecurity.PeerAuthentication{
		PortLevelMtls: map[uint32]*apisecurity.PeerAuthentication_MutualTLS{80: strict}}}
	err := in.Upsert(bad)
	var objErr *ObjectError
	if !errors.As(err, &objErr) || objErr.Reason != ReasonInvalid || objErr.Kind != "PeerAuthentication" ||
		objErr.Namespace != "ns" || objErr.Name != "workload" {
		t.Fatalf("Upsert(invalid) = %v, want an invalid PeerAuthentication ObjectError", err)
	}
	if got := paNames(store); len(got) != 1 || got["namespace-wide"] == nil {
		t.Fatalf("after the invalid update, PeerAuthentications = %v, want only namespace-wide", got)
	}
	if drNames(store)["workload"] == nil {
		t.Fatal("the DestinationRule of the same name went with the invalid PeerAuthentication")
	}

	if err := in.Delete(beta); err != nil {
		t.Fatal(err)
	}
	if got := paNames(store); len(got) != 0 {
		t.Fatalf("PeerAuthentications left after delete: %v", got)
	}
	if drNames(store)["workload"] == nil {
		t.Fatal("deleting a PeerAuthentication removed a DestinationRule")
	}
}
