package main

import (
	"github.com/spf13/cobra"

	"github.com/meshpilot/meshpilot/internal/version"
	"github.com/meshpilot/meshpilot/pkg/cni/plugin"
)

// cniCommandEnv is set by every container runtime that executes a CNI
// plugin. The runtime runs the binary copied into the CNI bin directory
// with no arguments, so cobra would only print usage: main hands the
// process to the plugin before cobra whenever this is set.
const cniCommandEnv = "CNI_COMMAND"

func newCNICommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cni",
		Short: "The CNI plugin that puts ambient pods into the mesh, and its installer",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "plugin",
		Short: "Run as the CNI plugin (CNI_COMMAND and the config on stdin, as a runtime executes it)",
		Long: "Run as the CNI plugin. A runtime executes the installed copy of this binary with no\n" +
			"arguments; whenever CNI_COMMAND is set, pilot runs the plugin whatever its arguments,\n" +
			"so this subcommand is the same thing spelled out, for trying it by hand.",
		Args: cobra.NoArgs,
		Run:  func(*cobra.Command, []string) { runCNIPlugin() },
	})
	return cmd
}

// runCNIPlugin does not return: the skel exits with the CNI result's code.
func runCNIPlugin() {
	plugin.Main("meshpilot CNI plugin " + version.String())
}
