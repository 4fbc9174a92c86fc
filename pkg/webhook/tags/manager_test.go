package tags

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// cluster is a fake API holding the injectors of revisions 1-7-6 and 1-8-1
// and of the non-revisioned control plane.
type cluster struct {
	t    *testing.T
	kube *fake.Clientset
	m    *Manager
}

func newCluster(t *testing.T, objects ...runtime.Object) *cluster {
	t.Helper()
	base := readInjector(t, "testdata/prod-on-1-8-1.in.yaml")
	injector := func(rev string) *admissionregistrationv1.MutatingWebhookConfiguration {
		mwc := base.DeepCopy()
		mwc.Name = InjectorName(rev, "")
		mwc.Labels[LabelRev] = NormalizeRevision(rev)
		for i := range mwc.Webhooks {
			mwc.Webhooks[i].ClientConfig.CABundle = []byte("ca-" + rev)
		}
		return mwc
	}
	objects = append(objects, injector("1-7-6"), injector("1-8-1"), readInjector(t, "testdata/prod-on-default.in.yaml"))
	kube := fake.NewClientset(objects...)
	return &cluster{t: t, kube: kube, m: NewManager(Options{Kube: kube})}
}

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func (c *cluster) get(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
	c.t.Helper()
	mwc, err := c.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatalf("get %s: %v", name, err)
	}
	return mwc
}

func (c *cluster) absent(name string) {
	c.t.Helper()
	_, err := c.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), name, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		c.t.Fatalf("%s: want NotFound, got %v", name, err)
	}
}

func (c *cluster) set(tag, rev string, overwrite bool) SetResult {
	c.t.Helper()
	res, err := c.m.Set(context.Background(), tag, rev, overwrite)
	if err != nil {
		c.t.Fatalf("set %s -> %s: %v", tag, rev, err)
	}
	return res
}

func caOf(mwc *admissionregistrationv1.MutatingWebhookConfiguration) string {
	return string(mwc.Webhooks[0].ClientConfig.CABundle)
}

func TestSetCreatesAndRetargets(t *testing.T) {
	c := newCluster(t)
	res := c.set("prod", "1-7-6", false)
	if !res.Created || res.Webhook != "istio-revision-tag-prod" || res.Deactivated != "" {
		t.Errorf("first set: %+v", res)
	}
	tag := c.get("istio-revision-tag-prod")
	if tag.Labels[LabelRev] != "1-7-6" || caOf(tag) != "ca-1-7-6" {
		t.Errorf("tag points to rev %q with ca %q", tag.Labels[LabelRev], caOf(tag))
	}

	// Same revision again is a refresh, not a retarget.
	if res := c.set("prod", "1-7-6", false); res.Created || res.PreviousRevision != "1-7-6" {
		t.Errorf("refresh: %+v", res)
	}

	_, err := c.m.Set(context.Background(), "prod", "1-8-1", false)
	var exists *TagExistsError
	if !errors.As(err, &exists) || exists.CurrentRevision != "1-7-6" || !strings.Contains(err.Error(), "--overwrite") {
		t.Fatalf("retarget without overwrite: %v", err)
	}
	if got := c.get("istio-revision-tag-prod").Labels[LabelRev]; got != "1-7-6" {
		t.Fatalf("refused retarget still moved the tag to %s", got)
	}

	res = c.set("prod", "1-8-1", true)
	if res.Created || res.PreviousRevision != "1-7-6" {
		t.Errorf("overwrite: %+v", res)
	}
	tag = c.get("istio-revision-tag-prod")
	if tag.Labels[LabelRev] != "1-8-1" || caOf(tag) != "ca-1-8-1" {
		t.Errorf("after overwrite tag points to rev %q with ca %q", tag.Labels[LabelRev], caOf(tag))
	}
	if c.get("istio-sidecar-injector").Annotations[AnnotationSavedSelectors] != "" {
		t.Error("a non-default tag deactivated the default injector")
	}
}

func TestSetKeepsForeignLabels(t *testing.T) {
	c := newCluster(t)
	c.set("prod", "1-7-6", false)
	tag := c.get("istio-revision-tag-prod")
	tag.Labels["team"] = "platform"
	if _, err := c.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(context.Background(), tag, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.set("prod", "1-8-1", true)
	if got := c.get("istio-revision-tag-prod").Labels; got["team"] != "platform" || got[LabelRev] != "1-8-1" {
		t.Errorf("labels after retarget: %v", got)
	}
}

func TestSetRefusals(t *testing.T) {
	c := newCluster(t)
	for _, tc := range []struct {
		name, tag, rev string
		check          func(error) bool
		mention        string
	}{
		{"missing revision", "prod", "1-9-0", func(err error) bool {
			var e *RevisionNotFoundError
			return errors.As(err, &e) && e.Injector == "istio-sidecar-injector-1-9-0"
		}, "1-9-0"},
		{"tag named like a revision", "1-7-6", "1-8-1", func(err error) bool {
			var e *TagShadowsRevisionError
			return errors.As(err, &e)
		}, "istio-sidecar-injector-1-7-6"},
		{"invalid tag", "Prod", "1-8-1", func(err error) bool { return err != nil }, "Prod"},
		{"empty tag", "", "1-8-1", func(err error) bool { return err != nil }, "tag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.m.Set(context.Background(), tc.tag, tc.rev, false)
			if !tc.check(err) {
				t.Fatalf("unexpected error %v", err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
		})
	}
	list, err := c.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().List(context.Background(), metav1.ListOptions{LabelSelector: LabelTag})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("refused sets created %d tags", len(list.Items))
	}
}

func TestDefaultTagDeactivatesAndRestores(t *testing.T) {
	c := newCluster(t)
	original := c.get("istio-sidecar-injector")

	res := c.set("default", "1-8-1", false)
	if res.Deactivated != "istio-sidecar-injector" {
		t.Errorf("set default: %+v", res)
	}
	off := c.get("istio-sidecar-injector")
	legacy := map[string]string{"istio-injection": "enabled"}
	if got := matching(t, off, legacy, nil); len(got) > 0 {
		t.Errorf("deactivated injector still matches a legacy namespace: %v", got)
	}
	if got := matching(t, c.get("istio-revision-tag-default"), legacy, nil); len(got) != 1 {
		t.Errorf("default tag matches a legacy namespace with %v, want one webhook", got)
	}

	// Moving default between revisions keeps the saved originals.
	if res := c.set("default", "1-7-6", true); res.Deactivated != "" {
		t.Errorf("retarget reported a second deactivation: %+v", res)
	}

	_, err := c.m.Set(context.Background(), "default", "default", false)
	var exists *TagExistsError
	if !errors.As(err, &exists) {
		t.Fatalf("handing default back without overwrite: %v", err)
	}
	res = c.set("default", "", true)
	if res.Restored != "istio-sidecar-injector" || res.Deleted != "istio-revision-tag-default" || res.Webhook != "" {
		t.Errorf("set default to default: %+v", res)
	}
	c.absent("istio-revision-tag-default")
	if diff := cmp.Diff(original.Webhooks, c.get("istio-sidecar-injector").Webhooks); diff != "" {
		t.Errorf("restored injector differs (-original +restored):\n%s", diff)
	}
}

func TestRemove(t *testing.T) {
	c := newCluster(t,
		namespace("shop", map[string]string{LabelRev: "prod"}),
		namespace("cart", map[string]string{LabelRev: "prod"}),
		namespace("legacy", map[string]string{LabelInjection: "enabled"}),
		namespace("other", map[string]string{LabelRev: "1-7-6"}),
	)
	c.set("prod", "1-7-6", false)
	c.set("canary", "1-8-1", false)

	_, err := c.m.Remove(context.Background(), "prod", false)
	var inUse *TagInUseError
	if !errors.As(err, &inUse) || !slices.Equal(inUse.Namespaces, []string{"cart", "shop"}) {
		t.Fatalf("remove in-use tag: %v", err)
	}
	if !strings.Contains(err.Error(), "cart, shop") || !strings.Contains(err.Error(), "--force") {
		t.Errorf("message %q names neither the namespaces nor --force", err)
	}
	c.get("istio-revision-tag-prod")

	res, err := c.m.Remove(context.Background(), "prod", true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Webhook != "istio-revision-tag-prod" || !slices.Equal(res.Namespaces, []string{"cart", "shop"}) {
		t.Errorf("forced remove: %+v", res)
	}
	c.absent("istio-revision-tag-prod")

	if _, err := c.m.Remove(context.Background(), "canary", false); err != nil {
		t.Errorf("remove unused tag: %v", err)
	}
	c.absent("istio-revision-tag-canary")

	_, err = c.m.Remove(context.Background(), "prod", false)
	var notFound *TagNotFoundError
	if !errors.As(err, &notFound) {
		t.Errorf("remove missing tag: %v", err)
	}
}

// TestRemoveDefault: the legacy namespace would block removal, but the
// restored non-revisioned injector serves it, so removal goes ahead.
func TestRemoveDefault(t *testing.T) {
	c := newCluster(t, namespace("legacy", map[string]string{LabelInjection: "enabled"}))
	original := c.get("istio-sidecar-injector")
	c.set("default", "1-8-1", false)
	res, err := c.m.Remove(context.Background(), "default", false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Restored != "istio-sidecar-injector" || !slices.Equal(res.Namespaces, []string{"legacy"}) {
		t.Errorf("remove default: %+v", res)
	}
	c.absent("istio-revision-tag-default")
	restored := c.get("istio-sidecar-injector")
	if diff := cmp.Diff(original.Webhooks, restored.Webhooks); diff != "" {
		t.Errorf("restored injector differs (-original +restored):\n%s", diff)
	}
	if IsDeactivated(restored) {
		t.Error("restored injector still carries the saved selectors")
	}
}

// TestRemoveDefaultWithoutFallback: with no non-revisioned injector the
// legacy namespaces would be stranded, so removal is refused.
func TestRemoveDefaultWithoutFallback(t *testing.T) {
	c := newCluster(t, namespace("legacy", map[string]string{LabelInjection: "enabled"}))
	if err := c.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), "istio-sidecar-injector", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if res := c.set("default", "1-8-1", false); res.Deactivated != "" {
		t.Errorf("deactivated a missing injector: %+v", res)
	}
	_, err := c.m.Remove(context.Background(), "default", false)
	var inUse *TagInUseError
	if !errors.As(err, &inUse) || !slices.Equal(inUse.Namespaces, []string{"legacy"}) {
		t.Fatalf("remove default without fallback: %v", err)
	}
}

func TestListAndTable(t *testing.T) {
	c := newCluster(t,
		namespace("shop", map[string]string{LabelRev: "prod"}),
		namespace("legacy", map[string]string{LabelInjection: "enabled"}),
		namespace("pinned", map[string]string{LabelRev: "default"}),
		namespace("plain", nil),
	)
	c.set("prod", "1-7-6", false)
	c.set("default", "1-8-1", false)
	c.set("canary", "1-8-1", false)
	infos, err := c.m.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []TagInfo{
		{Tag: "canary", Revision: "1-8-1", Webhook: "istio-revision-tag-canary"},
		{Tag: "default", Revision: "1-8-1", Webhook: "istio-revision-tag-default", Namespaces: []string{"legacy", "pinned"}},
		{Tag: "prod", Revision: "1-7-6", Webhook: "istio-revision-tag-prod", Namespaces: []string{"shop"}},
	}
	if diff := cmp.Diff(want, infos); diff != "" {
		t.Fatalf("list (-want +got):\n%s", diff)
	}

	var buf bytes.Buffer
	if err := WriteTable(&buf, infos); err != nil {
		t.Fatal(err)
	}
	rows := tableRows(buf.String())
	wantRows := [][]string{
		{"TAG", "REVISION", "NAMESPACES"},
		{"canary", "1-8-1", "<none>"},
		{"default", "1-8-1", "legacy,pinned"},
		{"prod", "1-7-6", "shop"},
	}
	if diff := cmp.Diff(wantRows, rows); diff != "" {
		t.Errorf("table (-want +got):\n%s\n%s", diff, buf.String())
	}
}

func tableRows(s string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		rows = append(rows, strings.Fields(line))
	}
	return rows
}

func TestNamespaceSuffixOutsideIstioSystem(t *testing.T) {
	injector := readInjector(t, "testdata/prod-on-1-8-1.in.yaml")
	injector.Name = "istio-sidecar-injector-1-8-1-mesh"
	kube := fake.NewClientset(injector)
	m := NewManager(Options{Kube: kube, IstioNamespace: "mesh"})
	res, err := m.Set(context.Background(), "prod", "1-8-1", false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Webhook != "istio-revision-tag-prod-mesh" {
		t.Errorf("webhook %q", res.Webhook)
	}
	if _, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), "istio-revision-tag-prod-mesh", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
}
