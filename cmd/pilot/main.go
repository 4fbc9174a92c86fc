// Command pilot is the meshpilot control plane: `pilot discovery` serves xDS
// from Kubernetes or a YAML directory, `pilot nodeproxy` runs the ambient
// node proxy, `pilot tag` manages revision tags,
// and `pilot version` prints the version.
package main

import (
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "pilot",
		Short:         "meshpilot: a service-mesh control plane that speaks Istio's APIs",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(newDiscoveryCommand(), newNodeProxyCommand(), newVersionCommand(), newTagCommand())
	if err := root.Execute(); err != nil {
		os.Exit(1)
	}
}
