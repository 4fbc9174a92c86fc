package plugin

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestAmbient reads Pods and their Namespace through KubePods and decides
// which are captured. A Pod with an injected sidecar is not, even in an
// ambient namespace: its sidecar redirects its traffic already, and a
// second capture in front of it would send that traffic through both
// proxies, or back and forth between them.
func TestAmbient(t *testing.T) {
	injected := map[string]string{"sidecar.istio.io/status": `{"containers":["istio-proxy"]}`}
	for _, tc := range []struct {
		name        string
		nsLabels    map[string]string
		labels      map[string]string
		annotations map[string]string
		want        bool
	}{
		{"namespace ambient", map[string]string{"istio.io/dataplane-mode": "ambient"}, nil, nil, true},
		{"pod ambient", nil, map[string]string{"istio.io/dataplane-mode": "ambient"}, nil, true},
		{"pod opted out", map[string]string{"istio.io/dataplane-mode": "ambient"},
			map[string]string{"istio.io/dataplane-mode": "none"}, nil, false},
		{"neither", nil, nil, nil, false},
		{"namespace ambient, sidecar injected", map[string]string{"istio.io/dataplane-mode": "ambient"}, nil, injected, false},
		{"pod ambient, sidecar injected", nil, map[string]string{"istio.io/dataplane-mode": "ambient"}, injected, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods := &KubePods{Client: fake.NewSimpleClientset(
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app", Labels: tc.nsLabels}},
				&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "a", UID: "uid-a",
					Labels: tc.labels, Annotations: tc.annotations}},
			)}
			info, err := pods.Get(context.Background(), "app", "a")
			if err != nil {
				t.Fatal(err)
			}
			if got := info.Ambient(); got != tc.want {
				t.Errorf("Ambient() = %v, want %v", got, tc.want)
			}
		})
	}
}
