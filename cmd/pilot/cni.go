package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshpilot/meshpilot/internal/exepages"
	"github.com/meshpilot/meshpilot/internal/version"
	"github.com/meshpilot/meshpilot/pkg/cni/agentapi"
	"github.com/meshpilot/meshpilot/pkg/cni/install"
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
	cmd.AddCommand(newCNIInstallCommand())
	return cmd
}

func newCNIInstallCommand() *cobra.Command {
	var (
		opt                 install.Options
		writeKubeconfig     bool
		releaseStartup      bool
		logLevel, logFormat string
	)
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Install the CNI plugin on this node and keep it installed until SIGTERM",
		Long: "Copies this binary into --cni-bin-dir under --plugin-name, appends the plugin to the\n" +
			"primary conflist in --cni-conf-dir (the first *.conf or *.conflist by name), repairs the\n" +
			"entry whenever the primary plugin rewrites the file, and on SIGTERM removes its own entry\n" +
			"and binary. Run it from a DaemonSet with both directories mounted from the host.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(logLevel, logFormat, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			opt.Log = log
			if opt.SourceBinary, err = os.Executable(); err != nil {
				return fmt.Errorf("find this binary to copy: %w", err)
			}
			if writeKubeconfig {
				if opt.Kubeconfig, err = install.InClusterKubeconfig(); err != nil {
					return err
				}
			}
			in, err := install.New(opt)
			if err != nil {
				return err
			}
			// SIGTERM is the DaemonSet pod going away: remove the entry, or
			// the runtime would fail every pod on a binary that may vanish.
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			if releaseStartup {
				go exepages.ReleaseWhen(ctx, in.Installed(), log)
			}
			log.Info("installing the CNI plugin", "version", version.String(), "confDir", opt.ConfDir, "binDir", opt.BinDir)
			return in.Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opt.ConfDir, "cni-conf-dir", "/etc/cni/net.d", "the node's CNI config directory")
	f.StringVar(&opt.BinDir, "cni-bin-dir", "/opt/cni/bin", "the node's CNI binary directory")
	f.StringVar(&opt.PluginName, "plugin-name", install.DefaultPluginName, "the plugin's binary name and conflist type")
	f.StringVar(&opt.AgentSocket, "agent-socket", agentapi.DefaultSocketPath, "the node agent's Unix socket, as the plugin sees it on the host")
	f.DurationVar(&opt.AgentTimeout, "agent-timeout", 10*time.Second, "how long the plugin waits for the node agent")
	f.StringSliceVar(&opt.ExcludeNamespaces, "exclude-namespaces", []string{"kube-system"}, "namespaces whose pods the plugin never looks up nor captures")
	f.BoolVar(&writeKubeconfig, "write-kubeconfig", true, "write a kubeconfig for the plugin from this pod's ServiceAccount (in-cluster only)")
	f.BoolVar(&releaseStartup, "release-startup-pages", true, "once the plugin is in place, unmap the parts of the binary only start-up read and let the kernel reclaim them first")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text or json")
	return cmd
}

// runCNIPlugin does not return: the skel exits with the CNI result's code.
func runCNIPlugin() {
	plugin.Main("meshpilot CNI plugin " + version.String())
}
