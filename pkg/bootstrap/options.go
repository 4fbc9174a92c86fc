package bootstrap

import (
	"errors"
	"log/slog"
	"os"
	"time"
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

	XDSAddr        string
	HTTPAddr       string
	MonitoringAddr string

	DomainSuffix  string
	RootNamespace string

	DebounceAfter time.Duration
	DebounceMax   time.Duration
	// SendTimeout bounds one xDS send; a client slower than this loses its stream.
	SendTimeout time.Duration
	// ShutdownGrace bounds how long streams and HTTP requests may drain.
	ShutdownGrace time.Duration

	Logger *slog.Logger
}

// DefaultOptions returns Istio's defaults: xDS on 15010, debug on 8080,
// metrics on 15014.
func DefaultOptions() Options {
	return Options{
		XDSAddr:        ":15010",
		HTTPAddr:       ":8080",
		MonitoringAddr: ":15014",
		DomainSuffix:   "cluster.local",
		RootNamespace:  "istio-system",
		DebounceAfter:  100 * time.Millisecond,
		DebounceMax:    10 * time.Second,
		SendTimeout:    10 * time.Second,
		ShutdownGrace:  10 * time.Second,
	}
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
	if o.DomainSuffix == "" {
		errs = append(errs, errors.New("--domain must not be empty"))
	}
	if o.DebounceAfter <= 0 || o.DebounceMax < o.DebounceAfter {
		errs = append(errs, errors.New("--debounce-after must be positive and not above --debounce-max"))
	}
	return errors.Join(errs...)
}
