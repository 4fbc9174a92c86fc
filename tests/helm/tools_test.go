package helm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshpilot/meshpilot/internal/kubetest"
)

// tools runs the helm and kubectl binaries that hack/envtest-assets.sh
// builds next to kube-apiserver, with Helm's state kept in temporary
// directories so the user's repositories and caches never leak in.
type tools struct {
	root    string
	helm    string
	kubectl string
	env     []string
}

func newTools(t *testing.T) *tools {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make test`, or export KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh)")
	}
	root, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tl := &tools{root: root, helm: filepath.Join(assets, "helm"), kubectl: filepath.Join(assets, "kubectl")}
	for _, bin := range []string{tl.helm, tl.kubectl} {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("%v: rebuild the assets with hack/envtest-assets.sh", err)
		}
	}
	home := t.TempDir()
	tl.env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		// kubectl's discovery and HTTP cache, kept out of $HOME/.kube/cache.
		"KUBECACHEDIR="+filepath.Join(home, "kubectl-cache"),
		"HELM="+tl.helm,
	)
	return tl
}

// chart is the path of a chart directory.
func (tl *tools) chart(name string) string { return filepath.Join(tl.root, "charts", name) }

// run executes bin with stdin and returns its stdout, failing the test with
// stderr on error.
func (tl *tools) run(t *testing.T, stdin string, bin string, args ...string) string {
	t.Helper()
	out, err := tl.try(stdin, bin, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return out
}

// try is run without failing: it returns stdout, or stdout and stderr with
// the error.
func (tl *tools) try(stdin string, bin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = tl.env
	cmd.Dir = tl.root
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// writeKubeconfig saves credentials for the test API server: the admin's
// client certificate, or a bearer token when token is set.
func writeKubeconfig(t *testing.T, cfg *rest.Config, token string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	user := &clientcmdapi.AuthInfo{Token: token}
	if token == "" {
		user = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	}
	kc.AuthInfos["user"] = user
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "user"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}
