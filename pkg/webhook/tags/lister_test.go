package tags

import (
	"context"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestRevisionTagListerSeesOnlyItsRevisionsTags(t *testing.T) {
	mwc := func(name string, labels map[string]string) *admissionregistrationv1.MutatingWebhookConfiguration {
		return &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	client := fake.NewClientset(
		mwc("istio-revision-tag-prod", map[string]string{LabelTag: "prod", LabelRev: "1-8-1"}),
		mwc("istio-revision-tag-default", map[string]string{LabelTag: "default", LabelRev: "1-8-1"}),
		mwc("istio-revision-tag-old", map[string]string{LabelTag: "old", LabelRev: "1-7-6"}),
		mwc("istio-sidecar-injector-1-8-1", map[string]string{LabelRev: "1-8-1"}),
	)
	lister := NewRevisionTagLister(client, "1-8-1")
	// Before the watch lists, the lister must not claim to know that no
	// tag points here: the injector would then skip every tagged Pod.
	if tags, known := lister.Tags(); known {
		t.Fatalf("before Run: tags %v reported as known", tags)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go lister.Run(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		tags, known := lister.Tags()
		if known && slices.Equal(tags, []string{"default", "prod"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tags of 1-8-1: %v (known %v), want [default prod]", tags, known)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// PointsHere asks the API server itself, so it answers for a tag the watch
// has not seen (here, the lister never runs).
func TestRevisionTagListerPointsHere(t *testing.T) {
	client := fake.NewClientset(
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{
			Name: "istio-revision-tag-prod", Labels: map[string]string{LabelTag: "prod", LabelRev: "1-8-1"}}},
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{
			Name: "istio-revision-tag-old", Labels: map[string]string{LabelTag: "old", LabelRev: "1-7-6"}}},
	)
	lister := NewRevisionTagLister(client, "1-8-1")
	for _, tc := range []struct {
		tag  string
		want bool
	}{{"prod", true}, {"old", false}, {"missing", false}} {
		got, err := lister.PointsHere(context.Background(), tc.tag)
		if err != nil || got != tc.want {
			t.Errorf("PointsHere(%q) = %v, %v; want %v", tc.tag, got, err, tc.want)
		}
	}
}
