package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshpilot/meshpilot/internal/kubetest"
)

// mesh is where a test puts config: a real API server or a YAML directory.
// Objects are grouped under a name so a group can be replaced or removed.
type mesh interface {
	apply(t *testing.T, group, yaml string)
	remove(t *testing.T, group string)
	// sourceFlags are the bootstrap settings that read this mesh.
	configure(o *controlPlaneOptions)
}

// kubeMesh applies YAML with the real kubectl against envtest.
type kubeMesh struct {
	kubectl    string
	kubeconfig string
	// cacheDir is kubectl's discovery and HTTP cache, the test's own: by
	// default kubectl writes it under $HOME/.kube/cache, a directory per API
	// server address, which grew by gigabytes over many runs of the suite.
	cacheDir string
	kube     kubernetes.Interface
	applied  map[string]string
	// pods counts the Pods createPod made, which it names by the count.
	pods int
}

func newKubeMesh(t *testing.T) *kubeMesh {
	m := kubeMeshOn(t, kubetest.Start(t))
	// The control plane's own namespace, as an installation creates it: it
	// holds the webhook CA Secret and the leader election Lease.
	m.run(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: istio-system}\n", "apply", "-f", "-")
	return m
}

// kubeMeshOn is a kubeMesh for a running API server, with no objects yet.
func kubeMeshOn(t *testing.T, env *kubetest.Env) *kubeMesh {
	dir := t.TempDir()
	path := filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(env.Config, path); err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}
	return &kubeMesh{
		kubectl:    filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl"),
		kubeconfig: path,
		cacheDir:   filepath.Join(dir, "kubectl-cache"),
		kube:       env.Kube,
		applied:    map[string]string{},
	}
}

// command is kubectl with args, as a user against this mesh's API server.
func (m *kubeMesh) command(args ...string) *exec.Cmd {
	return exec.Command(m.kubectl, append([]string{"--kubeconfig", m.kubeconfig, "--cache-dir", m.cacheDir}, args...)...)
}

func (m *kubeMesh) run(t *testing.T, stdin string, args ...string) {
	t.Helper()
	cmd := m.command(args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
}

func (m *kubeMesh) apply(t *testing.T, group, yaml string) {
	m.run(t, yaml, "apply", "-f", "-")
	m.applied[group] = yaml
}

func (m *kubeMesh) remove(t *testing.T, group string) {
	m.run(t, m.applied[group], "delete", "-f", "-")
	delete(m.applied, group)
}

func (m *kubeMesh) configure(o *controlPlaneOptions) { o.Kubeconfig = m.kubeconfig }

// dirMesh writes one file per group into a watched directory.
type dirMesh struct{ dir string }

func newDirMesh(t *testing.T) *dirMesh { return &dirMesh{dir: t.TempDir()} }

func (m *dirMesh) apply(t *testing.T, group, yaml string) {
	t.Helper()
	// Write then rename, as editors and ConfigMap mounts do, so the source
	// never reads half a file.
	tmp := filepath.Join(m.dir, "."+group+".tmp")
	if err := os.WriteFile(tmp, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(m.dir, group+".yaml")); err != nil {
		t.Fatal(err)
	}
}

func (m *dirMesh) remove(t *testing.T, group string) {
	t.Helper()
	if err := os.Remove(filepath.Join(m.dir, group+".yaml")); err != nil {
		t.Fatal(err)
	}
}

func (m *dirMesh) configure(o *controlPlaneOptions) { o.ConfigDir = m.dir }

// writeKubeconfig saves the admin credentials of the test API server, so
// that kubectl and `pilot discovery --kubeconfig` use it as users would.
func writeKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
		Token:                 cfg.BearerToken,
	}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	return clientcmd.WriteToFile(*kc, path)
}
