// Package layering enforces the pipeline's one-way data flow:
// controllers → model/store → pushcontext → xds. Only the wiring
// (pkg/bootstrap, cmd/) may see every stage. Within the xds stage, the
// generators for different kinds of client do not import each other.
package layering

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/meshpilot/meshpilot/"

// controlPlane are the packages of the control plane's own stages.
var controlPlane = []string{"pkg/model", "pkg/validation", "pkg/controllers", "pkg/pushcontext", "pkg/xds",
	"pkg/bootstrap", "pkg/ca", "pkg/webhook", "pkg/dirwatch"}

func TestStagesImportOnlyEarlierStages(t *testing.T) {
	cases := []struct {
		stage     string
		forbidden []string
	}{
		{"pkg/model", []string{"pkg/controllers", "pkg/pushcontext", "pkg/xds", "pkg/bootstrap", "pkg/validation"}},
		{"pkg/validation", []string{"pkg/controllers", "pkg/pushcontext", "pkg/xds", "pkg/bootstrap"}},
		{"pkg/controllers", []string{"pkg/pushcontext", "pkg/xds", "pkg/bootstrap"}},
		{"pkg/pushcontext", []string{"pkg/controllers", "pkg/xds", "pkg/bootstrap"}},
		{"pkg/xds", []string{"pkg/controllers", "pkg/bootstrap"}},
		// Sibling generators share code only through packages of their own
		// (loadassign), so that each can change without breaking the other.
		{"pkg/xds/envoygen", []string{"pkg/xds/grpcgen"}},
		{"pkg/xds/grpcgen", []string{"pkg/xds/envoygen"}},
		{"pkg/xds/loadassign", []string{"pkg/xds/envoygen", "pkg/xds/grpcgen"}},
		// The data plane is a client of the control plane: it reaches it
		// over xDS and the CA's API only, sharing nothing but the wire
		// types (pkg/workloadapi).
		{"pkg/nodeproxy", controlPlane},
		{"pkg/hbone", controlPlane},
		{"pkg/netns", controlPlane},
		{"pkg/origdst", controlPlane},
		{"pkg/caclient", controlPlane},
		{"pkg/capture", controlPlane},
		// The CNI plugin and installer run on nodes, beside the node proxy:
		// they decide ambient membership from the API server themselves.
		{"pkg/cni", controlPlane},
	}
	for _, tc := range cases {
		t.Run(tc.stage, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", module+tc.stage+"/...").CombinedOutput()
			if err != nil {
				t.Fatalf("go list: %v\n%s", err, out)
			}
			deps := strings.Fields(string(out))
			if len(deps) == 0 {
				t.Fatalf("go list found no packages under %s", tc.stage)
			}
			for _, dep := range deps {
				for _, f := range tc.forbidden {
					if dep == module+f || strings.HasPrefix(dep, module+f+"/") {
						t.Errorf("%s depends on %s, a stage it must not see", tc.stage, dep)
					}
				}
			}
		})
	}
}
