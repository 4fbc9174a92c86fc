// Command apiserver runs a kube-apiserver and etcd from the envtest assets
// (KUBEBUILDER_ASSETS) with meshpilot's CRDs installed and room for tens of
// thousands of Services, writes an admin kubeconfig, and stays up until it
// is interrupted or terminated. hack/bench-load.sh uses it so that the
// control plane and the load tool can run as separate processes against a
// real API server, as kubetest.StartAtScale gives tests one.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

func main() {
	// controller-runtime registers its own -kubeconfig on the global set.
	fs := flag.NewFlagSet("apiserver", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "where to write the kubeconfig (required)")
	crds := fs.String("crds", "manifests/crds", "directory of the CRDs to install")
	serviceRange := fs.String("service-cluster-ip-range", "10.96.0.0/16", "ClusterIP range; the default /24 holds 254 Services")
	_ = fs.Parse(os.Args[1:])
	if err := run(*kubeconfig, *crds, *serviceRange); err != nil {
		fmt.Fprintln(os.Stderr, "apiserver:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, crds, serviceRange string) error {
	if kubeconfig == "" {
		return fmt.Errorf("--kubeconfig is required")
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return fmt.Errorf("KUBEBUILDER_ASSETS is not set: run `make envtest-assets` and export its output")
	}
	env := &envtest.Environment{
		ControlPlaneStartTimeout: 2 * time.Minute,
		CRDInstallOptions:        envtest.CRDInstallOptions{Paths: []string{crds}, ErrorIfPathMissing: true},
	}
	env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", serviceRange)
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "apiserver: stop:", err)
		}
	}()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	if err := os.MkdirAll(filepath.Dir(kubeconfig), 0o755); err != nil {
		return err
	}
	// Written last, to a temporary name first: its appearance means ready.
	tmp := kubeconfig + ".tmp"
	if err := clientcmd.WriteToFile(*kc, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, kubeconfig); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "apiserver: serving on %s; kubeconfig %s\n", cfg.Host, kubeconfig)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	return nil
}
