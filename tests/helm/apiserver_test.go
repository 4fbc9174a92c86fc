package helm

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
)

// TestRenderedObjectsOnAPIServer has a real API server validate every object
// each case renders (kubectl apply --dry-run=server, CRDs included), then
// installs the default and canary revisions side by side with helm to show
// that no two objects collide.
func TestRenderedObjectsOnAPIServer(t *testing.T) {
	tl := newTools(t)
	env := kubetest.Start(t) // installs the CRDs from manifests/crds first
	kubeconfig := writeKubeconfig(t, env.Config, "")
	tl.run(t, "", tl.kubectl, "--kubeconfig", kubeconfig, "create", "namespace", releaseNamespace)

	cases := loadCases(t)
	for _, c := range cases {
		t.Run("dry-run/"+c.name, func(t *testing.T) {
			rendered := tl.render(t, c, "base", true) + "\n---\n" + tl.render(t, c, "pilot", false)
			out := tl.run(t, rendered, tl.kubectl, "--kubeconfig", kubeconfig, "apply", "--dry-run=server", "-f", "-")
			if n := strings.Count(out, "(server dry run)"); n < strings.Count(rendered, "\nkind: ") {
				t.Errorf("the API server checked %d objects, fewer than rendered:\n%s", n, out)
			}
		})
	}

	t.Run("two revisions side by side", func(t *testing.T) {
		byName := map[string]goldenCase{}
		for _, c := range cases {
			byName[c.name] = c
		}
		def, canary := byName["default"], byName["canary"]
		tl.run(t, "", tl.helm, "--kubeconfig", kubeconfig, "install", def.releaseName("base"), tl.chart("base"),
			"--namespace", releaseNamespace)
		for _, c := range []goldenCase{def, canary} {
			tl.run(t, "", tl.helm, "--kubeconfig", kubeconfig, "install", c.releaseName("pilot"), tl.chart("pilot"),
				"--namespace", releaseNamespace, "-f", c.valuesFile(t, "pilot"))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, name := range []string{"istiod", "istiod-canary"} {
			if _, err := env.Kube.AppsV1().Deployments(releaseNamespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
				t.Errorf("deployment %s: %v", name, err)
			}
		}
		injectors, err := env.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx,
			metav1.ListOptions{LabelSelector: "app=sidecar-injector"})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, m := range injectors.Items {
			names = append(names, m.Name+"@"+m.Labels["istio.io/rev"])
		}
		if got, want := strings.Join(names, ","), "istio-sidecar-injector@default,istio-sidecar-injector-canary@canary"; got != want {
			t.Errorf("injectors: %s, want %s", got, want)
		}
	})
}
