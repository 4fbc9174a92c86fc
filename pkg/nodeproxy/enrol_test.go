package nodeproxy

import (
	"errors"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodJoinChanged(t *testing.T) {
	ip := []corev1.PodIP{{IP: "10.0.0.5"}}
	pod := func(labels, annotations map[string]string, ips []corev1.PodIP) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
			Status: corev1.PodStatus{PodIPs: ips}}
	}
	ambient := map[string]string{"istio.io/dataplane-mode": "ambient", "app": "web"}
	none := map[string]string{"istio.io/dataplane-mode": "none", "app": "web"}
	plain := map[string]string{"app": "web"}
	redirected := map[string]string{RedirectionAnnotation: "enabled"}
	injected := map[string]string{"sidecar.istio.io/status": "{}"}
	for _, tc := range []struct {
		name     string
		old, cur *corev1.Pod
		want     bool
	}{
		{"labelled ambient", pod(plain, nil, ip), pod(ambient, nil, ip), true},
		{"opted out", pod(ambient, nil, ip), pod(none, nil, ip), true},
		{"label removed", pod(ambient, nil, ip), pod(plain, nil, ip), true},
		{"first addresses", pod(ambient, nil, nil), pod(ambient, nil, ip), true},
		// A new sandbox (the old one died) has new addresses. Its ADD
		// decided on the labels it read; a namespace relabelled while it
		// ran was looked at with the old sandbox's record gone, so the new
		// addresses are the last chance to decide again.
		{"new sandbox's addresses", pod(plain, nil, ip), pod(plain, nil, []corev1.PodIP{{IP: "10.0.0.9"}}), true},
		{"sidecar injected", pod(plain, nil, ip), pod(plain, injected, ip), true},
		// The agent's own annotation, set or removed, moves nothing: a
		// DEL's removal must not bring the pod straight back.
		{"redirection annotation removed", pod(ambient, redirected, ip), pod(ambient, nil, ip), false},
		{"another label", pod(plain, nil, ip), pod(map[string]string{"app": "api"}, nil, ip), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := podJoinChanged(tc.old, tc.cur); got != tc.want {
				t.Errorf("podJoinChanged = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNamespaceHolding(t *testing.T) {
	v4, v6 := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")
	for _, tc := range []struct {
		name    string
		byIP    map[netip.Addr][]string
		ips     []netip.Addr
		want    string
		wantErr bool
	}{
		{"one namespace", map[netip.Addr][]string{v4: {"/run/netns/a"}}, []netip.Addr{v4}, "/run/netns/a", false},
		{"dual stack, one holds both", map[netip.Addr][]string{v4: {"/run/netns/a", "/run/netns/b"}, v6: {"/run/netns/a"}},
			[]netip.Addr{v4, v6}, "/run/netns/a", false},
		// A stray copy of the address elsewhere makes the answer unsure:
		// capturing the wrong namespace would break someone else.
		{"two hold it", map[netip.Addr][]string{v4: {"/run/netns/a", "/run/netns/b"}}, []netip.Addr{v4}, "", true},
		{"none holds it", map[netip.Addr][]string{}, []netip.Addr{v4}, "", true},
		{"no addresses", map[netip.Addr][]string{v4: {"/run/netns/a"}}, nil, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := namespaceHolding(tc.byIP, tc.ips)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Fatalf("namespaceHolding = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
			if err != nil && !errors.Is(err, errNetnsNotFound) {
				t.Errorf("error %v is not errNetnsNotFound", err)
			}
		})
	}
}
