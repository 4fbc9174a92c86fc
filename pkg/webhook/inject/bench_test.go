package inject

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// BenchmarkReview is one Pod creation through the default template: the
// decision, the render, two strategic merges and the patch diff.
func BenchmarkReview(b *testing.B) {
	dir := writeConfigDir(b, DefaultConfig(), DefaultValues())
	h, err := NewHandler(Options{ConfigDir: dir, NamespaceLabels: enabledNamespace})
	if err != nil {
		b.Fatal(err)
	}
	pod := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"cart-7d9f","namespace":"shop",
"labels":{"app":"cart","version":"v1"},"annotations":{"prometheus.io/scrape":"true"}},
"spec":{"serviceAccountName":"cart","containers":[{"name":"cart","image":"example.com/cart:1",
"ports":[{"name":"http","containerPort":8080}],"env":[{"name":"MODE","value":"prod"}],
"resources":{"requests":{"cpu":"100m","memory":"64Mi"}}}]}}`)
	req := &admissionv1.AdmissionRequest{
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Namespace: "shop",
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: pod},
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		resp := h.Review(ctx, req)
		if len(resp.Patch) == 0 {
			b.Fatal("not injected")
		}
	}
}

// BenchmarkReviewSkipped is a Pod that is not opted in: the common case for
// a webhook whose selectors are misconfigured to send everything.
func BenchmarkReviewSkipped(b *testing.B) {
	dir := writeConfigDir(b, DefaultConfig(), DefaultValues())
	h, err := NewHandler(Options{ConfigDir: dir, NamespaceLabels: func(string) map[string]string { return map[string]string{} }})
	if err != nil {
		b.Fatal(err)
	}
	req := &admissionv1.AdmissionRequest{
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Namespace: "shop",
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: []byte(simplePod)},
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if resp := h.Review(ctx, req); len(resp.Patch) != 0 {
			b.Fatal("injected")
		}
	}
}
