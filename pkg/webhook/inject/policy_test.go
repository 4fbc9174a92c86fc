package inject

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDecide(t *testing.T) {
	enabledNS := map[string]string{LabelInjection: "enabled"}
	tags := func(names ...string) func() ([]string, bool) { return func() ([]string, bool) { return names, true } }
	strict := tags()
	unsynced := func() ([]string, bool) { return nil, false }
	tests := []struct {
		name        string
		revision    string
		tags        func() ([]string, bool)
		policy      policy
		nsLabels    map[string]string
		podLabels   map[string]string
		annotations map[string]string
		confirm     func(string) bool
		hostNetwork bool
		namespace   string
		containers  []string
		want        string
	}{
		{name: "default ns label", nsLabels: enabledNS, tags: strict},
		{name: "ns injection disabled", nsLabels: map[string]string{LabelInjection: "disabled"}, tags: strict, want: skipNotOptedIn},
		{name: "ns injection disabled beats pod opt-in", nsLabels: map[string]string{LabelInjection: "disabled"},
			podLabels: map[string]string{LabelSidecarInject: "true"}, tags: strict, want: skipNotOptedIn},
		{name: "pod label opt-in", podLabels: map[string]string{LabelSidecarInject: "true"}, tags: strict},
		{name: "pod label yes", podLabels: map[string]string{LabelSidecarInject: "Yes"}, tags: strict},
		{name: "pod annotation opt-in", annotations: map[string]string{LabelSidecarInject: "true"}, tags: strict},
		{name: "label beats annotation", podLabels: map[string]string{LabelSidecarInject: "false"},
			annotations: map[string]string{LabelSidecarInject: "true"}, nsLabels: enabledNS, tags: strict, want: skipOptedOut},
		{name: "opt-out label", nsLabels: enabledNS, podLabels: map[string]string{LabelSidecarInject: "false"}, tags: strict, want: skipOptedOut},
		{name: "opt-out annotation", nsLabels: enabledNS, annotations: map[string]string{LabelSidecarInject: "false"}, tags: strict, want: skipOptedOut},
		{name: "unknown value opts out", nsLabels: enabledNS, podLabels: map[string]string{LabelSidecarInject: "maybe"}, tags: strict, want: skipOptedOut},
		{name: "nothing asked", tags: strict, want: skipNotOptedIn},
		{name: "nil namespace labels", nsLabels: nil, podLabels: map[string]string{LabelSidecarInject: "true"}, tags: strict},
		{name: "host network", nsLabels: enabledNS, hostNetwork: true, tags: strict, want: skipHostNetwork},
		{name: "kube-system labelled", namespace: "kube-system", nsLabels: enabledNS, tags: strict, want: skipSystemNamespace},
		{name: "kube-system pod opt-in", namespace: "kube-system", podLabels: map[string]string{LabelSidecarInject: "true"},
			tags: strict, want: skipSystemNamespace},
		{name: "kube-public revision", namespace: "kube-public", revision: "canary", nsLabels: map[string]string{LabelRevision: "canary"},
			tags: strict, want: skipSystemNamespace},
		{name: "kube-node-lease", namespace: "kube-node-lease", nsLabels: enabledNS, tags: strict, want: skipSystemNamespace},
		{name: "istio-system is not exempt", namespace: "istio-system", nsLabels: enabledNS, tags: strict},
		{name: "status annotation", nsLabels: enabledNS, annotations: map[string]string{AnnotationStatus: "{}"}, tags: strict, want: skipAlreadyInjected},
		{name: "proxy container", nsLabels: enabledNS, containers: []string{"app", ProxyContainerName}, tags: strict, want: skipAlreadyInjected},

		{name: "default injector, istio.io/rev=default", nsLabels: map[string]string{LabelRevision: "default"}, tags: strict},
		{name: "default injector, ns revision", nsLabels: map[string]string{LabelRevision: "canary"}, tags: strict, want: skipOtherRevision},
		{name: "default injector, pod revision", podLabels: map[string]string{LabelRevision: "canary"}, tags: strict, want: skipOtherRevision},
		{name: "ns injection label beats pod revision", nsLabels: enabledNS,
			podLabels: map[string]string{LabelRevision: "canary"}, revision: "canary", tags: strict, want: skipOtherRevision},
		{name: "ns injection label beats ns revision", nsLabels: map[string]string{LabelInjection: "enabled", LabelRevision: "canary"},
			revision: "canary", tags: strict, want: skipOtherRevision},

		{name: "revision by ns", revision: "canary", nsLabels: map[string]string{LabelRevision: "canary"}, tags: strict},
		{name: "revision by pod", revision: "canary", podLabels: map[string]string{LabelRevision: "canary"}, tags: strict},
		{name: "ns revision beats pod revision", revision: "canary", nsLabels: map[string]string{LabelRevision: "stable"},
			podLabels: map[string]string{LabelRevision: "canary"}, tags: strict, want: skipOtherRevision},
		{name: "revision opt-out", revision: "canary", nsLabels: map[string]string{LabelRevision: "canary"},
			podLabels: map[string]string{LabelSidecarInject: "false"}, tags: strict, want: skipOptedOut},
		{name: "revision does not take default opt-in", revision: "canary", nsLabels: enabledNS, tags: strict, want: skipOtherRevision},
		{name: "revision does not take pod opt-in", revision: "canary", podLabels: map[string]string{LabelSidecarInject: "true"},
			tags: strict, want: skipOtherRevision},
		{name: "tag pointing here", revision: "1-8-1", nsLabels: map[string]string{LabelRevision: "prod"}, tags: tags("prod")},
		{name: "tag pointing elsewhere", revision: "1-8-1", nsLabels: map[string]string{LabelRevision: "prod"}, tags: tags("staging"),
			want: skipOtherRevision},
		{name: "default tag pointing here", revision: "1-8-1", nsLabels: enabledNS, tags: tags("default")},
		{name: "no tag source trusts selectors", revision: "1-8-1", nsLabels: map[string]string{LabelRevision: "prod"}},
		// Right after a restart the tag watch has not listed yet; an empty
		// list then must not turn tagged Pods away without a sidecar.
		{name: "unsynced tag source trusts selectors", revision: "1-8-1", nsLabels: map[string]string{LabelRevision: "prod"}, tags: unsynced},
		{name: "unsynced tag source, default tag", revision: "1-8-1", nsLabels: enabledNS, tags: unsynced},
		{name: "unsynced tag source still honours opt-out", revision: "1-8-1", nsLabels: map[string]string{LabelRevision: "prod"},
			podLabels: map[string]string{LabelSidecarInject: "false"}, tags: unsynced, want: skipOptedOut},

		// A tag that has just moved here reaches the injector before its
		// watch: the API server is asked before the Pod is turned away.
		{name: "tag moved here, watch behind", revision: "1-8-1", nsLabels: map[string]string{LabelRevision: "prod"},
			tags: tags("staging"), confirm: func(tag string) bool { return tag == "prod" }},
		{name: "tag pointing elsewhere, confirmed", revision: "1-8-1", nsLabels: map[string]string{LabelRevision: "prod"},
			tags: tags("staging"), confirm: func(string) bool { return false }, want: skipOtherRevision},
		{name: "tag known here, nothing to confirm", revision: "1-8-1", nsLabels: map[string]string{LabelRevision: "prod"},
			tags: tags("prod"), confirm: func(string) bool { panic("confirmed a tag the watch knows") }},

		{name: "policy disabled, ns opt-in", policy: policyDisabled, nsLabels: enabledNS, tags: strict, want: skipPolicyDisabled},
		{name: "policy disabled, pod opt-in", policy: policyDisabled, nsLabels: enabledNS,
			podLabels: map[string]string{LabelSidecarInject: "true"}, tags: strict},
		{name: "policy disabled, revision ns", policy: policyDisabled, revision: "canary",
			nsLabels: map[string]string{LabelRevision: "canary"}, tags: strict, want: skipPolicyDisabled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: tt.namespace, Labels: tt.podLabels, Annotations: tt.annotations},
				Spec:       corev1.PodSpec{HostNetwork: tt.hostNetwork},
			}
			containers := tt.containers
			if containers == nil {
				containers = []string{"app"}
			}
			for _, c := range containers {
				pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c})
			}
			p := tt.policy
			if p == "" {
				p = policyEnabled
			}
			got := decide(decisionInput{pod: pod, nsLabels: tt.nsLabels, policy: p, revision: tt.revision, revisionTags: tt.tags,
				confirmTag: tt.confirm})
			if got != tt.want {
				t.Fatalf("decide = %q, want %q", got, tt.want)
			}
		})
	}
}
