package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshpilot/meshpilot/internal/exepages"
	"github.com/meshpilot/meshpilot/internal/version"
	"github.com/meshpilot/meshpilot/pkg/caclient"
	"github.com/meshpilot/meshpilot/pkg/capture"
	"github.com/meshpilot/meshpilot/pkg/cni/agentapi"
	"github.com/meshpilot/meshpilot/pkg/controllers"
	"github.com/meshpilot/meshpilot/pkg/nodeproxy"
)

// nodeProxyFlags are `pilot nodeproxy`'s settings, named after ztunnel's
// environment where it has one.
type nodeProxyFlags struct {
	xdsAddress, xdsServerName          string
	caRoot, tokenFile                  string
	node, podName, podNamespace, podIP string
	netnsTemplate, httpAddr, domain    string
	logLevel, logFormat                string
	cniSocket, kubeconfig, trustDomain string
	captureBackend                     string
	excludeNamespaces                  []string
	drain                              time.Duration
	releaseStartupPages                bool
}

func newNodeProxyCommand() *cobra.Command {
	var f nodeProxyFlags
	cmd := &cobra.Command{
		Use:   "nodeproxy",
		Short: "Run the ambient node proxy: HBONE on :15008 for the node's ambient workloads",
		Long: `Run the node proxy of ambient mode, one per node (as a DaemonSet). It
connects to the control plane on 15012 with its ServiceAccount token, learns
the mesh's workloads over WDS, gets a certificate for each ambient workload
on its node from the CA (by impersonation), and, inside each such workload's
network namespace, terminates HBONE on :15008 with that workload's
certificate and tunnels the workload's captured outbound connections
(:15001) to their destinations. Its node agent (--cni-socket) installs each
new ambient pod's capture when the CNI plugin asks, opens the pod's
listeners, and annotates the Pod so that peers start using HBONE.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return runNodeProxy(f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.xdsAddress, "xds-address", envOr("XDS_ADDRESS", "istiod.istio-system.svc:15012"), "the control plane's TLS xDS and CA address; its host is the name checked in the serving certificate")
	fl.StringVar(&f.xdsServerName, "xds-server-name", os.Getenv("ISTIOD_SAN"), "the name checked in the control plane's serving certificate when it is not --xds-address's host, as when that is an IP (Istio's ISTIOD_SAN)")
	fl.StringVar(&f.caRoot, "ca-root-cert", "/var/run/secrets/istio/root-cert.pem", "the mesh root (the istio-ca-root-cert ConfigMap's root-cert.pem), which the control plane's certificate must chain to")
	fl.StringVar(&f.tokenFile, "token-file", "/var/run/secrets/tokens/istio-token", "the node proxy's projected ServiceAccount token, audience istio-ca, bound to its Pod")
	fl.StringVar(&f.node, "node-name", os.Getenv("NODE_NAME"), "the node's name; the proxy serves the ambient Pods whose spec.nodeName it is")
	fl.StringVar(&f.podName, "pod-name", os.Getenv("POD_NAME"), "the node proxy's Pod, for its xDS node ID")
	fl.StringVar(&f.podNamespace, "pod-namespace", envOr("POD_NAMESPACE", "istio-system"), "the node proxy's namespace")
	fl.StringVar(&f.podIP, "pod-ip", os.Getenv("INSTANCE_IP"), "the node proxy's IP, for its xDS node ID")
	fl.StringVar(&f.netnsTemplate, "netns-path", "/var/run/netns/{namespace}_{name}", "where a workload's network namespace is, with {namespace} and {name} replaced")
	fl.StringVar(&f.httpAddr, "http-addr", ":15020", "/metrics, /healthz/ready and /debug/ (certs, workloads, tunnels); empty disables")
	fl.StringVar(&f.domain, "cluster-domain", "cluster.local", "the cluster's DNS domain")
	fl.StringVar(&f.cniSocket, "cni-socket", agentapi.DefaultSocketPath, "the node agent's Unix socket, where the CNI plugin asks for each new ambient pod's capture; empty disables the agent")
	fl.StringSliceVar(&f.excludeNamespaces, "cni-exclude-namespaces", []string{"kube-system"}, "namespaces whose running pods the node agent never captures when they are labelled into ambient mode (the CNI plugin's --exclude-namespaces)")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig the node agent reads and annotates Pods with (default: $KUBECONFIG, ~/.kube/config, or the pod's service account)")
	fl.StringVar(&f.captureBackend, "capture-backend", capture.DefaultBackend, "how the node agent redirects a pod's traffic inside its network namespace: nftables (over netlink, no binary needed) or iptables (the node's iptables-restore, for nodes whose rules are iptables rules)")
	fl.StringVar(&f.trustDomain, "trust-domain", "cluster.local", "the mesh's trust domain, for the identity of a pod captured before WDS tells of it")
	fl.BoolVar(&f.releaseStartupPages, "release-startup-pages", true, "once the first workload set has arrived, unmap the parts of the binary only start-up read and let the kernel reclaim them first")
	fl.DurationVar(&f.drain, "drain", 10*time.Second, "how long open tunnels may finish on SIGTERM")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", "text", "text or json")
	return cmd
}

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

// kubeClient reads the kubeconfig at path, else the default places and
// then the pod's ServiceAccount.
func kubeClient(path string) (kubernetes.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return kubernetes.NewForConfig(controllers.BuiltinKindsConfig(cfg))
}

func runNodeProxy(f nodeProxyFlags) error {
	logger, err := newLogger(f.logLevel, f.logFormat, os.Stderr)
	if err != nil {
		return err
	}
	if f.node == "" {
		return errors.New("--node-name (or NODE_NAME) is required")
	}
	// Read on each handshake: the mounted istio-ca-root-cert changes when
	// the mesh's root is rotated.
	roots, err := caclient.NewRootFile(f.caRoot)
	if err != nil {
		return fmt.Errorf("--ca-root-cert: %w", err)
	}
	serverName, _, err := net.SplitHostPort(f.xdsAddress)
	if err != nil {
		return fmt.Errorf("--xds-address: %w", err)
	}
	if f.xdsServerName != "" {
		serverName = f.xdsServerName
	}
	conn, err := grpc.NewClient(f.xdsAddress,
		grpc.WithTransportCredentials(credentials.NewTLS(roots.ClientTLS(serverName))),
		grpc.WithPerRPCCredentials(caclient.BearerToken(caclient.TokenFile(f.tokenFile))))
	if err != nil {
		return err
	}
	defer conn.Close()
	backend, err := capture.BackendByName(f.captureBackend)
	if err != nil {
		return fmt.Errorf("--capture-backend: %w", err)
	}
	var kube kubernetes.Interface
	if f.cniSocket != "" {
		if kube, err = kubeClient(f.kubeconfig); err != nil {
			return fmt.Errorf("node agent (--cni-socket): %w", err)
		}
	}
	registry := prometheus.NewRegistry()
	proxy, err := nodeproxy.New(nodeproxy.Options{
		Node: f.node, Conn: conn, IP: f.podIP, PodName: f.podName, Namespace: f.podNamespace, Domain: f.domain,
		PodNetns: func(namespace, name string) (string, error) {
			return strings.NewReplacer("{namespace}", namespace, "{name}", name).Replace(f.netnsTemplate), nil
		},
		Kube: kube, CNISocket: f.cniSocket, ExcludeNamespaces: f.excludeNamespaces, TrustDomain: f.trustDomain, Capture: backend,
		Metrics: nodeproxy.NewMetrics(registry),
		Log:     logger,
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if f.httpAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
		mux.Handle("/debug/", proxy.DebugHandler())
		mux.HandleFunc("/healthz/ready", func(w http.ResponseWriter, _ *http.Request) {
			select {
			case <-proxy.Synced():
				fmt.Fprintln(w, "ready")
			default:
				http.Error(w, "waiting for the first WDS response", http.StatusServiceUnavailable)
			}
		})
		srv := &http.Server{Addr: f.httpAddr, Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 90 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("http server failed", "err", err)
			}
		}()
		defer srv.Close()
	}
	if f.releaseStartupPages {
		go exepages.ReleaseWhen(ctx, proxy.Synced(), logger)
	}
	logger.Info("starting the node proxy", "version", version.String(), "node", f.node, "xds", f.xdsAddress)
	return proxy.Run(ctx, f.drain)
}
