package kubetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// envtest logs its progress through controller-runtime's logger, which
// complains, with a stack trace, when nothing was set before it is used;
// a test reads the API server's own output when it needs to, not those lines.
func init() { ctrllog.SetLogger(logr.Discard()) }

const (
	assetsEnv       = "KUBEBUILDER_ASSETS"
	startTimeoutEnv = "KUBEBUILDER_CONTROLPLANE_START_TIMEOUT"
	// defaultStartTimeout replaces envtest's 20s, which is tight on a busy
	// two-core machine.
	defaultStartTimeout = 60 * time.Second
)

// Env is a running API server with clients for it.
type Env struct {
	Config *rest.Config
	Kube   kubernetes.Interface
	Istio  istioclient.Interface
	// ServiceAccountSigningKeyFile is the PEM private key the API server
	// signs ServiceAccount tokens with, for tests that must mint a token the
	// API server would sign but cannot be asked for (an expired one).
	ServiceAccountSigningKeyFile string

	// certDir and dataDir tell this Env's kube-apiserver and etcd from
	// any other test's (see Restart).
	certDir, dataDir string
}

// shortSkipReason is why an integration test skips under -short.
const shortSkipReason = "needs a real kube-apiserver and etcd (envtest); -short runs only the tests that need no API server"

// Start runs a fresh control plane for the test and stops it in t.Cleanup.
// Under -short (`make test-unit`) it skips the test. Otherwise it fails the
// test when KUBEBUILDER_ASSETS is unset: integration tests are part of the
// suite and must not pass by not running.
func Start(t testing.TB) *Env {
	t.Helper()
	env := start(t, testing.Short(), nil)
	env.InstallCRDs(t)
	return env
}

// StartWithoutCRDs is Start without meshpilot's CRDs, for tests of what
// happens when they are installed later (with InstallCRDs).
func StartWithoutCRDs(t testing.TB) *Env {
	t.Helper()
	return start(t, testing.Short(), nil)
}

// StartAtScale is Start with room for tens of thousands of Services: the
// API server's default service range (a /24) holds 254 ClusterIPs.
func StartAtScale(t testing.TB) *Env {
	t.Helper()
	env := start(t, testing.Short(), func(e *envtest.Environment) {
		e.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", "10.96.0.0/16")
	})
	env.InstallCRDs(t)
	return env
}

// InstallCRDs installs meshpilot's CRDs (manifests/crds) and returns once
// discovery serves them.
func (e *Env) InstallCRDs(t testing.TB) {
	t.Helper()
	crds, err := meshCRDs()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(e.Config, envtest.CRDInstallOptions{
		CRDs: crds,
		// envtest waits 10s for discovery to serve them, which a busy
		// two-core machine running the race tests beside missed once.
		MaxTime: defaultStartTimeout,
	}); err != nil {
		t.Fatalf("install CRDs: %v", err)
	}
}

// parsedCRDs holds manifests/crds as read once per test binary: the Istio
// CRDs are half a megabyte of YAML, which took a fifth of a second of CPU to
// parse for every API server a package started (more under -race).
var parsedCRDs = sync.OnceValues(func() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	opts := envtest.CRDInstallOptions{Paths: []string{filepath.Join(root, "manifests", "crds")}, ErrorIfPathMissing: true}
	if err := envtest.ReadCRDFiles(&opts); err != nil {
		return nil, fmt.Errorf("read CRDs: %w", err)
	}
	return opts.CRDs, nil
})

// meshCRDs returns copies of the parsed CRDs: creating one writes the API
// server's answer (resource version, UID) into the object it was given.
func meshCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	crds, err := parsedCRDs()
	if err != nil {
		return nil, err
	}
	copies := make([]*apiextensionsv1.CustomResourceDefinition, len(crds))
	for i, crd := range crds {
		copies[i] = crd.DeepCopy()
	}
	return copies, nil
}

// startAttempts is how many fresh environments start tries. envtest
// retries a failed start itself, but with the ports it chose the first
// time: when another process took one of them between envtest's probe and
// etcd's bind (the tests beside it dial and listen all the time), every
// retry fails the same way. A fresh environment chooses new ports.
const startAttempts = 3

func startEnvironment(configure func(*envtest.Environment)) (*envtest.Environment, *rest.Config, error) {
	var errs []error
	for range startAttempts {
		env := &envtest.Environment{}
		if os.Getenv(startTimeoutEnv) == "" {
			env.ControlPlaneStartTimeout = defaultStartTimeout
		}
		if configure != nil {
			configure(env)
		}
		cfg, err := env.Start()
		if err == nil {
			return env, cfg, nil
		}
		_ = env.Stop() // whatever did start
		errs = append(errs, err)
	}
	return nil, nil, errors.Join(errs...)
}

func start(t testing.TB, short bool, configure func(*envtest.Environment)) *Env {
	t.Helper()
	if short {
		t.Skip(shortSkipReason)
	}
	if os.Getenv(assetsEnv) == "" {
		t.Fatalf("%s is not set: run `make envtest-assets` (the Makefile's test targets set it), "+
			"or export %s=<dir holding kube-apiserver, etcd and kubectl>", assetsEnv, assetsEnv)
	}
	env, cfg, err := startEnvironment(configure)
	if err != nil {
		t.Fatalf("start envtest control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop envtest control plane: %v", err)
		}
	})
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	istio, err := istioclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &Env{Config: cfg, Kube: kube, Istio: istio,
		// envtest's own file name in the API server's cert dir.
		ServiceAccountSigningKeyFile: filepath.Join(env.ControlPlane.GetAPIServer().CertDir, "sa-signer.key"),
		certDir:                      env.ControlPlane.GetAPIServer().CertDir,
		dataDir:                      env.ControlPlane.Etcd.DataDir,
	}
}

// Namespace creates a namespace with a generated name starting with prefix
// and returns its name. A bare API server never finishes deleting
// namespaces, so each test gets its own instead of reusing one.
func (e *Env) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix = strings.TrimSuffix(strings.ToLower(prefix), "-") + "-"
	ns, err := e.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return ns.Name
}

// RepoRoot walks up from the working directory to the directory that holds
// go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("kubetest: no go.mod above the working directory")
		}
		dir = parent
	}
}
