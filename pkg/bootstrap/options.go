package bootstrap

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/meshpilot/meshpilot/pkg/ca"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// Options configure a control plane. The zero value is not usable; start
// from DefaultOptions.
type Options struct {
	// ConfigDir enables the YAML-directory source.
	ConfigDir string
	// Kubeconfig enables the Kubernetes source. InCluster enables it with
	// the pod's service account instead.
	Kubeconfig string
	InCluster  bool

	XDSAddr string
	// SecureXDSAddr is the TLS listener (Istio's 15012) that serves the
	// same ADS as XDSAddr and the CA. Empty disables it; it needs the
	// Kubernetes source, whose TokenReview proves callers' identities.
	SecureXDSAddr  string
	HTTPAddr       string
	MonitoringAddr string
	// EnableProfiling serves pprof under /debug/pprof/ on HTTPAddr. Off by
	// default: profiles and the command line are for whoever can reach the
	// port, which the kubelet's probes need open on the pod IP.
	EnableProfiling bool
	// ReleaseStartupPages hands the executable's pages that only start-up
	// read back to the kernel once the first push context is built (see
	// internal/exepages): about 35 MiB of RSS at rest.
	ReleaseStartupPages bool

	DomainSuffix  string
	RootNamespace string
	// TrustDomain is the SPIFFE trust domain of workload identities
	// (spiffe://<td>/ns/<ns>/sa/<sa>), the mesh config's trustDomain.
	TrustDomain string
	// DisableAutoMTLS turns off auto mTLS, as the mesh config's
	// enableAutoMtls: false does (it has no flag, as in Istio).
	DisableAutoMTLS bool

	DebounceAfter time.Duration
	DebounceMax   time.Duration
	// SendTimeout bounds one xDS send; a client slower than this loses its stream.
	SendTimeout time.Duration
	// MaxConcurrentSyncs bounds how many xDS streams are sent their initial
	// configuration at once, the longest-connected first; 0 is twice the
	// number of CPUs the process may use.
	MaxConcurrentSyncs int
	// ShutdownGrace bounds how long streams and HTTP requests may drain.
	ShutdownGrace time.Duration
	// MaxConnectionAge closes xDS connections this old (GOAWAY; 0 never
	// does), and MaxConnectionAgeGrace is how long their streams may go on
	// after it; then the clients reconnect, to any replica.
	MaxConnectionAge      time.Duration
	MaxConnectionAgeGrace time.Duration

	// Revision names this control plane among several installed side by
	// side ("" is the default revision), as Istio's istio.io/rev label does.
	Revision string

	Ingress        IngressOptions
	LeaderElection LeaderElectionOptions
	Webhook        WebhookOptions
	CA             CAOptions

	Logger *slog.Logger

	// meshConfig is set by LoadMeshConfig.
	meshConfig *meshConfigFile
}

// IngressOptions are the mesh settings for Kubernetes Ingress, named after
// Istio's mesh config (ingressClass, ingressControllerMode, ingressService,
// ingressSelector).
type IngressOptions struct {
	Class string
	Mode  model.IngressMode
	// Service is the gateway Service whose target ports the gateway listens
	// on and whose addresses Ingress status reports.
	Service model.NamespacedName
	// Selector picks the gateway proxies among routers by their labels.
	Selector map[string]string
}

// WebhookOptions configure the admission webhooks (sidecar injection and
// config validation) served over TLS.
type WebhookOptions struct {
	// Addr is where the webhooks listen; empty disables them.
	Addr string
	// Service and Namespace name the Service the API server calls, for the
	// serving certificate's names (the mesh CA signs it; its Secrets live
	// in Namespace).
	Service   string
	Namespace string
	// InjectConfigDir holds the injection template and values (the files
	// "config" and "values" of the mounted injector ConfigMap). Empty, the
	// default, serves the built-in template; the chart sets it to the
	// mount, /var/lib/istio/inject, as istiod's does.
	InjectConfigDir string
	// ExtraCertNames are more DNS names or IPs for the serving certificate,
	// for an API server that calls the webhooks by address (a control
	// plane run outside the cluster).
	ExtraCertNames []string
}

// CAOptions configure the mesh certificate authority, served on
// SecureXDSAddr, which also signs the webhooks' serving certificate. Its
// Secrets live in Webhook.Namespace, the control plane's namespace.
type CAOptions struct {
	// TrustedNodeAccounts ("ns/sa") may ask for the identity of a pod on
	// their own node: the node proxy's account, as istiod's
	// CA_TRUSTED_NODE_ACCOUNTS.
	TrustedNodeAccounts []string
	// WorkloadCertTTL is the lifetime of a workload certificate whose CSR
	// asks for none, MaxWorkloadCertTTL the most a CSR may ask for
	// (istiod's DEFAULT_WORKLOAD_CERT_TTL and MAX_WORKLOAD_CERT_TTL).
	WorkloadCertTTL    time.Duration
	MaxWorkloadCertTTL time.Duration
	// ServingCertTTL is the lifetime of the serving certificates of 15012
	// and of the webhooks, each renewed at 80% of it.
	ServingCertTTL time.Duration
}

// LeaderElectionOptions control the Lease that decides which replica writes
// Ingress status and events, istio-ca-root-cert and the webhooks' caBundle
// (writers.go lists every write).
type LeaderElectionOptions struct {
	Enabled   bool
	Namespace string
	Name      string
	// Identity names this replica in the Lease; the pod name in a cluster.
	Identity      string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// DefaultOptions returns Istio's defaults: xDS on 15010, debug on 8080,
// metrics on 15014.
func DefaultOptions() Options {
	return Options{
		XDSAddr:        ":15010",
		SecureXDSAddr:  ":15012",
		HTTPAddr:       ":8080",
		MonitoringAddr: ":15014",
		DomainSuffix:   "cluster.local",
		RootNamespace:  "istio-system",
		TrustDomain:    "cluster.local",
		DebounceAfter:  100 * time.Millisecond,
		DebounceMax:    10 * time.Second,
		SendTimeout:    10 * time.Second,
		ShutdownGrace:  10 * time.Second,
		// Costs nothing measurable later; see internal/exepages.
		ReleaseStartupPages: true,
		// Istio's defaults (keepaliveMaxServerConnectionAge).
		MaxConnectionAge:      30 * time.Minute,
		MaxConnectionAgeGrace: 10 * time.Second,
		Ingress: IngressOptions{
			Class:    "istio",
			Mode:     model.IngressModeStrict,
			Service:  model.NamespacedName{Namespace: "istio-system", Name: "istio-ingressgateway"},
			Selector: map[string]string{"istio": "ingressgateway"},
		},
		Webhook: WebhookOptions{
			Addr:      ":15017",
			Namespace: envOr("POD_NAMESPACE", "istio-system"),
		},
		CA: CAOptions{
			TrustedNodeAccounts: []string{"istio-system/ztunnel"},
			WorkloadCertTTL:     24 * time.Hour,
			MaxWorkloadCertTTL:  90 * 24 * time.Hour,
			ServingCertTTL:      24 * time.Hour,
		},
		LeaderElection: LeaderElectionOptions{
			Enabled:       true,
			Namespace:     envOr("POD_NAMESPACE", "istio-system"),
			Name:          "meshpilot-ingress-status",
			Identity:      defaultIdentity(),
			LeaseDuration: 15 * time.Second,
			RenewDeadline: 10 * time.Second,
			RetryPeriod:   2 * time.Second,
		},
	}
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// defaultIdentity is the pod name in a cluster (the downward API sets
// POD_NAME; the hostname is the pod name too), else the host and process.
func defaultIdentity() string {
	if pod := os.Getenv("POD_NAME"); pod != "" {
		return pod
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// InClusterAvailable reports whether the process runs in a Kubernetes pod,
// where an in-cluster client config can be built.
func InClusterAvailable() bool {
	return os.Getenv("KUBERNETES_SERVICE_HOST") != "" && os.Getenv("KUBERNETES_SERVICE_PORT") != ""
}

func (o *Options) validate() error {
	var errs []error
	if o.ConfigDir == "" && o.Kubeconfig == "" && !o.InCluster {
		errs = append(errs, errors.New("no config source: set --config-dir, --kubeconfig, or run in a cluster"))
	}
	if o.XDSAddr == "" {
		errs = append(errs, errors.New("--xds-addr is required"))
	}
	if o.TrustDomain == "" {
		errs = append(errs, errors.New("--trust-domain must not be empty"))
	}
	if _, err := ca.ParseNodeAccounts(o.CA.TrustedNodeAccounts); err != nil {
		errs = append(errs, fmt.Errorf("--trusted-node-accounts: %w", err))
	}
	if o.CA.WorkloadCertTTL <= 0 || o.CA.MaxWorkloadCertTTL < o.CA.WorkloadCertTTL {
		errs = append(errs, errors.New("--workload-cert-ttl must be positive and not above --max-workload-cert-ttl"))
	}
	if o.CA.ServingCertTTL < time.Minute {
		errs = append(errs, errors.New("--serving-cert-ttl must be at least a minute"))
	}
	if o.DomainSuffix == "" {
		errs = append(errs, errors.New("--domain must not be empty"))
	}
	if o.DebounceAfter <= 0 || o.DebounceMax < o.DebounceAfter {
		errs = append(errs, errors.New("--debounce-after must be positive and not above --debounce-max"))
	}
	switch o.Ingress.Mode {
	case model.IngressModeOff, model.IngressModeDefault, model.IngressModeStrict:
	default:
		errs = append(errs, fmt.Errorf("--ingress-controller-mode must be OFF, DEFAULT or STRICT, not %q", o.Ingress.Mode))
	}
	if le := o.LeaderElection; le.Enabled && (le.RenewDeadline >= le.LeaseDuration || le.RetryPeriod >= le.RenewDeadline) {
		errs = append(errs, errors.New("leader election needs retry period < renew deadline < lease duration"))
	}
	return errors.Join(errs...)
}
