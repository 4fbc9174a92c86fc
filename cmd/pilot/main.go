// Command pilot is the meshpilot control plane: `pilot discovery` serves xDS
// from Kubernetes or a YAML directory, `pilot nodeproxy` runs the ambient
// node proxy, `pilot cni` is the CNI plugin and its installer, `pilot tag`
// manages revision tags, and `pilot version` prints the version.
//
// When CNI_COMMAND is set, pilot is the CNI plugin whatever its name and
// arguments: the runtime executes the installed copy with none.
package main

import (
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if _, ok := os.LookupEnv(cniCommandEnv); ok {
		runCNIPlugin()
		return
	}
	root := &cobra.Command{
		Use:           "pilot",
		Short:         "meshpilot: a service-mesh control plane that speaks Istio's APIs",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(newDiscoveryCommand(), newNodeProxyCommand(), newCNICommand(), newVersionCommand(), newTagCommand())
	if err := root.Execute(); err != nil {
		os.Exit(1)
	}
}
