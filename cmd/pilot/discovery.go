package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/meshpilot/meshpilot/internal/version"
	"github.com/meshpilot/meshpilot/pkg/bootstrap"
	"github.com/meshpilot/meshpilot/pkg/model"
)

func newDiscoveryCommand() *cobra.Command {
	opts := bootstrap.DefaultOptions()
	var logLevel, logFormat, ingressService, ingressMode, meshConfig string
	cmd := &cobra.Command{
		Use:   "discovery",
		Short: "Run the control plane: watch config and serve xDS",
		Long: `Run the control plane. Config comes from a YAML directory (--config-dir),
from Kubernetes (--kubeconfig, or the pod's service account when running in a
cluster), or both. xDS clients connect to --xds-addr (plaintext). With a
Kubernetes source, --secure-xds-addr serves the same xDS over TLS together
with the CA (istio.v1.auth.IstioCertificateService).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := newLogger(logLevel, logFormat, os.Stderr)
			if err != nil {
				return err
			}
			opts.Logger = logger
			if opts.Ingress.Service, err = parseNamespacedName(ingressService); err != nil {
				return fmt.Errorf("--ingress-service: %w", err)
			}
			opts.Ingress.Mode = model.IngressMode(strings.ToUpper(ingressMode))
			if meshConfig != "" {
				if err := opts.LoadMeshConfig(meshConfig, cmd.Flags().Changed); err != nil {
					return err
				}
			}
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
	f.StringVar(&opts.SecureXDSAddr, "secure-xds-addr", opts.SecureXDSAddr, "address of the TLS xDS (ADS) and CA server; needs a Kubernetes source; empty disables it")
	f.StringVar(&opts.TrustDomain, "trust-domain", opts.TrustDomain, "SPIFFE trust domain of workload identities (default: the mesh config's trustDomain, else cluster.local)")
	f.StringSliceVar(&opts.CA.TrustedNodeAccounts, "trusted-node-accounts", opts.CA.TrustedNodeAccounts, "namespace/serviceaccount of node proxies that may ask the CA for the identities of pods on their own node (Istio's CA_TRUSTED_NODE_ACCOUNTS)")
	f.DurationVar(&opts.CA.WorkloadCertTTL, "workload-cert-ttl", opts.CA.WorkloadCertTTL, "lifetime of a workload certificate whose request asks for none (Istio's DEFAULT_WORKLOAD_CERT_TTL)")
	f.DurationVar(&opts.CA.MaxWorkloadCertTTL, "max-workload-cert-ttl", opts.CA.MaxWorkloadCertTTL, "longest workload certificate lifetime a request may ask for (Istio's MAX_WORKLOAD_CERT_TTL)")
	f.DurationVar(&opts.CA.ServingCertTTL, "serving-cert-ttl", opts.CA.ServingCertTTL, "lifetime of the serving certificates of --secure-xds-addr and --webhook-addr, from the mesh CA; renewed at 80% of it, without a restart")
	f.StringVar(&opts.HTTPAddr, "http-addr", opts.HTTPAddr, "address of the debug server (/ready, /healthz, /debug/...); empty disables it")
	f.StringVar(&opts.MonitoringAddr, "monitoring-addr", opts.MonitoringAddr, "address of the Prometheus /metrics server; empty disables it")
	f.BoolVar(&opts.EnableProfiling, "enable-profiling", opts.EnableProfiling, "serve pprof under /debug/pprof/ on --http-addr")
	f.BoolVar(&opts.ReleaseStartupPages, "release-startup-pages", opts.ReleaseStartupPages, "once the first push context is built, unmap the parts of the binary only start-up read and let the kernel reclaim them first (about 35 MiB less RSS at rest)")
	f.StringVar(&opts.DomainSuffix, "domain", opts.DomainSuffix, "DNS domain suffix of the cluster")
	f.StringVar(&opts.RootNamespace, "root-namespace", opts.RootNamespace, "namespace whose DestinationRules apply mesh-wide")
	f.DurationVar(&opts.DebounceAfter, "debounce-after", opts.DebounceAfter, "quiet period after a config change before pushing")
	f.DurationVar(&opts.DebounceMax, "debounce-max", opts.DebounceMax, "longest a push waits while changes keep arriving")
	f.DurationVar(&opts.SendTimeout, "send-timeout", opts.SendTimeout, "longest one xDS send may take before the stream is closed")
	f.IntVar(&opts.MaxConcurrentSyncs, "max-concurrent-syncs", opts.MaxConcurrentSyncs, "xDS streams sent their initial configuration at once, the longest-connected first, when many connect together; 0 is twice the CPUs available")
	f.DurationVar(&opts.ShutdownGrace, "shutdown-grace", opts.ShutdownGrace, "how long streams and requests may drain on shutdown")
	f.DurationVar(&opts.MaxConnectionAge, "keepalive-max-server-connection-age", opts.MaxConnectionAge, "close xDS connections this old (after a GOAWAY and the grace below), so clients spread over replicas again after a rollout; 0 never closes them")
	f.DurationVar(&opts.MaxConnectionAgeGrace, "keepalive-max-server-connection-age-grace", opts.MaxConnectionAgeGrace, "how long the streams of a connection past its maximum age may go on before they are closed")
	f.StringVar(&meshConfig, "mesh-config", "", "Istio mesh config file (the mesh key of the istio ConfigMap): rootNamespace, trustDomain and the ingress settings; flags given explicitly win. Watched: later changes are logged, and apply after a restart")
	f.StringVar(&opts.Ingress.Class, "ingress-class", opts.Ingress.Class, "value of the legacy kubernetes.io/ingress.class annotation that selects meshpilot")
	f.StringVar(&ingressMode, "ingress-controller-mode", string(opts.Ingress.Mode), "which Ingresses without any class are served: OFF (none at all), DEFAULT (taken) or STRICT (ignored)")
	f.StringVar(&ingressService, "ingress-service", opts.Ingress.Service.String(), "namespace/name of the ingress gateway Service: its target ports are the gateway's listen ports, its addresses go into Ingress status")
	f.StringToStringVar(&opts.Ingress.Selector, "ingress-selector", opts.Ingress.Selector, "labels that pick the ingress gateway proxies among the routers of the --ingress-service namespace")
	f.StringVar(&opts.Revision, "revision", opts.Revision, "revision of this control plane (istio.io/rev); empty is the default revision")
	f.StringVar(&opts.Webhook.Addr, "webhook-addr", opts.Webhook.Addr, "address of the TLS admission webhooks (/inject, /validate); empty disables them")
	f.StringVar(&opts.Webhook.Service, "webhook-service", opts.Webhook.Service, "Service the API server calls the webhooks through, named in their certificate (default istiod or istiod-<revision>)")
	f.StringVar(&opts.Webhook.Namespace, "webhook-namespace", opts.Webhook.Namespace, "the control plane's namespace: of that Service, of the webhook CA Secret and of the CA Secrets istio-ca-secret and cacerts ($POD_NAMESPACE in a pod)")
	f.StringSliceVar(&opts.Webhook.ExtraCertNames, "webhook-cert-extra-names", opts.Webhook.ExtraCertNames, "more DNS names or IPs for the webhook certificate, for an API server that calls the webhooks by address")
	f.StringVar(&opts.Webhook.InjectConfigDir, "inject-config-dir", opts.Webhook.InjectConfigDir, "directory holding the injection template and values (files config and values of the injector ConfigMap); empty serves the built-in template")
	le := &opts.LeaderElection
	f.BoolVar(&le.Enabled, "leader-elect", le.Enabled, "elect a leader among replicas; only it writes Ingress status and events, istio-ca-root-cert and the webhooks' caBundle")
	f.StringVar(&le.Namespace, "leader-elect-resource-namespace", le.Namespace, "namespace of the leader election Lease ($POD_NAMESPACE in a pod)")
	f.StringVar(&le.Name, "leader-elect-resource-name", le.Name, "name of the leader election Lease")
	f.StringVar(&le.Identity, "leader-elect-identity", le.Identity, "this replica's name in the Lease ($POD_NAME in a pod)")
	f.DurationVar(&le.LeaseDuration, "leader-elect-lease-duration", le.LeaseDuration, "how long a non-leader waits after the last renewal before taking over")
	f.DurationVar(&le.RenewDeadline, "leader-elect-renew-deadline", le.RenewDeadline, "how long the leader retries renewing before giving up leadership")
	f.DurationVar(&le.RetryPeriod, "leader-elect-retry-period", le.RetryPeriod, "how often replicas try to acquire or renew the Lease")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	return cmd
}

func parseNamespacedName(s string) (model.NamespacedName, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" {
		return model.NamespacedName{}, fmt.Errorf("want namespace/name, got %q", s)
	}
	return model.NamespacedName{Namespace: ns, Name: name}, nil
}
