package helm

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/pilotbin"
)

// TestDeploymentArgsParse builds pilot and has `pilot discovery` parse the
// arguments the chart renders, for each case: an unknown flag or a value of
// the wrong type fails here, not in a crash-looping pod.
func TestDeploymentArgsParse(t *testing.T) {
	tl := newTools(t)
	pilotBin := pilotbin.Path(t)
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

// TestDebugPortAsIstio: the debug server (8080: /debug/syncz,
// /debug/config_dump, pprof when enabled) is bound as istiod's chart binds
// it: on all interfaces, because the kubelet probes /ready on the pod IP,
// and never exposed by the Service. pprof follows pilot.enableProfiling.
func TestDebugPortAsIstio(t *testing.T) {
	tl := newTools(t)
	for _, c := range loadCases(t) {
		t.Run(c.name, func(t *testing.T) {
			rendered := tl.render(t, c, "pilot", false)
			for _, p := range renderedKind[corev1.Service](t, rendered, "Service").Spec.Ports {
				if p.Port == 8080 || p.TargetPort.IntValue() == 8080 || p.Name == "http-debug" {
					t.Errorf("the Service exposes the debug port: %+v", p)
				}
			}
			container := renderedDeployment(t, rendered).Spec.Template.Spec.Containers[0]
			pilotValues, _ := c.values["pilot"]["pilot"].(map[string]any)
			profiling, _ := pilotValues["enableProfiling"].(bool) // the chart's default is false
			for _, want := range []string{"--http-addr=:8080", fmt.Sprintf("--enable-profiling=%t", profiling)} {
				if !slices.Contains(container.Args, want) {
					t.Errorf("args %v lack %s", container.Args, want)
				}
			}
			for name, probe := range map[string]*corev1.Probe{"readiness": container.ReadinessProbe, "liveness": container.LivenessProbe} {
				if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Port.IntValue() != 8080 {
					t.Errorf("the %s probe does not use the debug port 8080: %+v", name, probe)
				}
			}
		})
	}
}

func renderedDeployment(t *testing.T, rendered string) *appsv1.Deployment {
	t.Helper()
	return renderedKind[appsv1.Deployment](t, rendered, "Deployment")
}

// renderedKind decodes the first rendered object of kind.
func renderedKind[T any](t *testing.T, rendered, kind string) *T {
	t.Helper()
	for _, doc := range strings.Split(rendered, "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil || meta.Kind != kind {
			continue
		}
		var obj T
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		return &obj
	}
	t.Fatalf("no %s rendered", kind)
	return nil
}

// TestDeploymentEnvOverrides: an entry of pilot.env replaces the variable
// of the same name that the chart sets (GOMEMLIMIT, as the README
// promises, and the downward API's POD_NAME and POD_NAMESPACE) rather than
// follow it. A container's env is a list keyed by name: server-side apply
// (kubectl apply --server-side, Argo CD, Flux) refuses a duplicate key,
// and a strategic merge patch that removes one removes both.
func TestDeploymentEnvOverrides(t *testing.T) {
	tl := newTools(t)
	for _, tc := range []struct {
		name string
		set  []string
		// want is each variable's value, or "<field>" for one from the
		// downward API.
		want map[string]string
	}{
		{"chart defaults", nil,
			map[string]string{"POD_NAME": "<metadata.name>", "POD_NAMESPACE": "<metadata.namespace>", "GOMEMLIMIT": "<limits.memory>"}},
		{"GOMEMLIMIT from pilot.env", []string{"pilot.env[0].name=GOMEMLIMIT", "pilot.env[0].value=900MiB"},
			map[string]string{"POD_NAME": "<metadata.name>", "POD_NAMESPACE": "<metadata.namespace>", "GOMEMLIMIT": "900MiB"}},
		{"another variable beside the chart's", []string{"pilot.env[0].name=GODEBUG", "pilot.env[0].value=madvdontneed=1"},
			map[string]string{"POD_NAME": "<metadata.name>", "POD_NAMESPACE": "<metadata.namespace>", "GOMEMLIMIT": "<limits.memory>",
				"GODEBUG": "madvdontneed=1"}},
		{"every chart variable from pilot.env", []string{
			"pilot.env[0].name=POD_NAMESPACE", "pilot.env[0].value=mesh",
			"pilot.env[1].name=GOMEMLIMIT", "pilot.env[1].value=1GiB",
			"pilot.env[2].name=POD_NAME", "pilot.env[2].value=pilot-0"},
			map[string]string{"POD_NAME": "pilot-0", "POD_NAMESPACE": "mesh", "GOMEMLIMIT": "1GiB"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", "istiod", tl.chart("pilot"), "--namespace", releaseNamespace,
				"--show-only", "templates/deployment.yaml"}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			env := renderedDeployment(t, tl.run(t, "", tl.helm, args...)).Spec.Template.Spec.Containers[0].Env
			got := map[string]string{}
			for _, e := range env {
				if _, dup := got[e.Name]; dup {
					t.Errorf("%s is set twice", e.Name)
				}
				switch {
				case e.ValueFrom == nil:
					got[e.Name] = e.Value
				case e.ValueFrom.FieldRef != nil:
					got[e.Name] = "<" + e.ValueFrom.FieldRef.FieldPath + ">"
				case e.ValueFrom.ResourceFieldRef != nil:
					got[e.Name] = "<" + e.ValueFrom.ResourceFieldRef.Resource + ">"
				}
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("env %v, want %v", got, tc.want)
			}
		})
	}
}
