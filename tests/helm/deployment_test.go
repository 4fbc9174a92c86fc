package helm

import (
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// TestDeploymentArgsParse builds pilot and has `pilot discovery` parse the
// arguments the chart renders, for each case: an unknown flag or a value of
// the wrong type fails here, not in a crash-looping pod.
func TestDeploymentArgsParse(t *testing.T) {
	tl := newTools(t)
	pilotBin := filepath.Join(t.TempDir(), "pilot")
	tl.run(t, "", "go", "build", "-o", pilotBin, "./cmd/pilot")
	for _, c := range loadCases(t) {
		t.Run(c.name, func(t *testing.T) {
			deploy := renderedDeployment(t, tl.render(t, c, "pilot", false))
			containers := deploy.Spec.Template.Spec.Containers
			if len(containers) != 1 {
				t.Fatalf("%d containers", len(containers))
			}
			args := containers[0].Args
			if len(args) == 0 || args[0] != "discovery" {
				t.Fatalf("args %v do not start with discovery", args)
			}
			// --help stops after parsing: every flag must exist and every
			// value must parse.
			tl.run(t, "", pilotBin, append(args, "--help")...)
		})
	}
}

func renderedDeployment(t *testing.T, rendered string) *appsv1.Deployment {
	t.Helper()
	for _, doc := range strings.Split(rendered, "\n---\n") {
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &d); err == nil && d.Kind == "Deployment" {
			return &d
		}
	}
	t.Fatal("no Deployment rendered")
	return nil
}
