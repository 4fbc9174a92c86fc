package plugin

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestKubePodsReadsMembership reads Pods and their Namespace through
// KubePods, as the plugin does at ADD; the rule itself is membership's.
func TestKubePodsReadsMembership(t *testing.T) {
	injected := map[string]string{"sidecar.istio.io/status": `{"containers":["istio-proxy"]}`}
	for _, tc := range []struct {
		name        string
		nsLabels    map[string]string
		labels      map[string]string
		annotations map[string]string
		want        bool
	}{
		{"namespace ambient", map[string]string{"istio.io/dataplane-mode": "ambient"}, nil, nil, true},
		{"pod opted out", map[string]string{"istio.io/dataplane-mode": "ambient"},
			map[string]string{"istio.io/dataplane-mode": "none"}, nil, false},
		{"namespace ambient, sidecar injected", map[string]string{"istio.io/dataplane-mode": "ambient"}, nil, injected, false},
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
