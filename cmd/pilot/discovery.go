package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/meshpilot/meshpilot/internal/version"
	"github.com/meshpilot/meshpilot/pkg/bootstrap"
)

func newDiscoveryCommand() *cobra.Command {
	opts := bootstrap.DefaultOptions()
	var logLevel, logFormat string
	cmd := &cobra.Command{
		Use:   "discovery",
		Short: "Run the control plane: watch config and serve xDS",
		Long: `Run the control plane. Config comes from a YAML directory (--config-dir),
from Kubernetes (--kubeconfig, or the pod's service account when running in a
cluster), or both. xDS clients connect to --xds-addr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := newLogger(logLevel, logFormat)
			if err != nil {
				return err
			}
			opts.Logger = logger
			if opts.Kubeconfig == "" && opts.ConfigDir == "" {
				opts.InCluster = bootstrap.InClusterAvailable()
			}
			logger.Info("starting meshpilot", "version", version.String())
			srv, err := bootstrap.New(opts)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return srv.Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.ConfigDir, "config-dir", opts.ConfigDir, "directory of Kubernetes YAML to serve; watched and reloaded on change")
	f.StringVar(&opts.Kubeconfig, "kubeconfig", opts.Kubeconfig, "kubeconfig of the cluster to watch (in a pod, the service account is used when neither this nor --config-dir is set)")
	f.StringVar(&opts.XDSAddr, "xds-addr", opts.XDSAddr, "address of the plaintext xDS (ADS) server")
	f.StringVar(&opts.HTTPAddr, "http-addr", opts.HTTPAddr, "address of the debug server (/ready, /healthz, /debug/...); empty disables it")
	f.StringVar(&opts.MonitoringAddr, "monitoring-addr", opts.MonitoringAddr, "address of the Prometheus /metrics server; empty disables it")
	f.StringVar(&opts.DomainSuffix, "domain", opts.DomainSuffix, "DNS domain suffix of the cluster")
	f.StringVar(&opts.RootNamespace, "root-namespace", opts.RootNamespace, "namespace whose DestinationRules apply mesh-wide")
	f.DurationVar(&opts.DebounceAfter, "debounce-after", opts.DebounceAfter, "quiet period after a config change before pushing")
	f.DurationVar(&opts.DebounceMax, "debounce-max", opts.DebounceMax, "longest a push waits while changes keep arriving")
	f.DurationVar(&opts.SendTimeout, "send-timeout", opts.SendTimeout, "longest one xDS send may take before the stream is closed")
	f.DurationVar(&opts.ShutdownGrace, "shutdown-grace", opts.ShutdownGrace, "how long streams and requests may drain on shutdown")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	return cmd
}

func newLogger(level, format string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	handlerOpts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, handlerOpts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, handlerOpts)), nil
	}
	return nil, fmt.Errorf("--log-format must be text or json, not %q", format)
}
