// Command pilot is the meshpilot control plane: `pilot discovery` serves xDS
// from Kubernetes or a YAML directory, `pilot nodeproxy` runs the ambient
// node proxy, `pilot cni` is the CNI plugin and its installer, `pilot tag`
// manages revision tags, and `pilot version` prints the version.
//
// When CNI_COMMAND is set, pilot is the CNI plugin whatever its name and
// arguments: the runtime executes the installed copy with none.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/meshpilot/meshpilot/internal/version"
)

func main() {
	if _, ok := os.LookupEnv(cniCommandEnv); ok {
		runCNIPlugin()
		return
	}
	if err := newRootCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "pilot",
		Short:         "meshpilot: a service-mesh control plane that speaks Istio's APIs",
		SilenceUsage:  true,
		SilenceErrors: false,
		// --version prints what `pilot version` prints, so scripts can use either.
		Version: version.String(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	// cobra points at --help for an unknown command but not for an unknown
	// flag, and SilenceUsage hides the flag list; say where to look.
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		//lint:ignore ST1005 the second line is a sentence for the user, as cobra's own hint is
		return fmt.Errorf("%w\nRun '%s --help' for usage.", err, cmd.CommandPath())
	})
	root.AddCommand(newDiscoveryCommand(), newNodeProxyCommand(), newCNICommand(), newVersionCommand(), newTagCommand(), newLoadCommand())
	return root
}
