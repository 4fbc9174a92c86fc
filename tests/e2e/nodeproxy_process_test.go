package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/pilotbin"
	"github.com/meshpilot/meshpilot/internal/testlog"
	"github.com/meshpilot/meshpilot/internal/testport"
)

// TestNodeProxyProcessReleasesStartupPages runs `pilot nodeproxy` as its
// DaemonSet does, a process with a bound token and the published root, on
// two nodes: one with the default --release-startup-pages, one without.
// Both must get their first workload set over TLS (which also proves
// --xds-server-name: the control plane is dialled by IP), and the default
// one must give back the binary's start-up pages.
func TestNodeProxyProcessReleasesStartupPages(t *testing.T) {
	m := newKubeMesh(t)
	cp := startControlPlane(t, m)
	m.apply(t, "node-proxies", nodeProxyPodsYAML("node-1", "node-2"))
	rootPEM, serverTLS := publishedRootTLS(t, m, "istio-system")
	dir := t.TempDir()
	root := filepath.Join(dir, "root-cert.pem")
	if err := os.WriteFile(root, rootPEM, 0o600); err != nil {
		t.Fatal(err)
	}

	start := func(node string, args ...string) (pid int, logs *testlog.Buffer, ready string) {
		token := filepath.Join(dir, node+".token")
		if err := os.WriteFile(token, []byte(m.createBoundToken(t, "istio-system", "ztunnel", "istio-ca", "ztunnel-"+node)), 0o600); err != nil {
			t.Fatal(err)
		}
		httpAddr := testport.Addr(t)
		cmd := exec.Command(pilotbin.Path(t), append([]string{"nodeproxy",
			"--xds-address", cp.secureXDSAddr, "--xds-server-name", serverTLS.ServerName,
			"--ca-root-cert", root, "--token-file", token,
			"--node-name", node, "--pod-name", "ztunnel-" + node, "--pod-ip", "127.0.0.1",
			"--cni-socket", "", "--http-addr", httpAddr}, args...)...)
		logs = &testlog.Buffer{}
		cmd.Stderr = logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("node proxy %s:\n%s", node, logs.String())
			}
		})
		return cmd.Process.Pid, logs, "http://" + httpAddr + "/healthz/ready"
	}
	keptPID, keptLogs, keptReady := start("node-1", "--release-startup-pages=false")
	pid, logs, ready := start("node-2")

	const released = "released the executable's start-up pages"
	waitFor(t, 30*time.Second, "both node proxies ready", func() error {
		for _, u := range []string{keptReady, ready} {
			if code := httpStatus(u); code != http.StatusOK {
				return fmt.Errorf("%s: %d", u, code)
			}
		}
		return nil
	})
	waitFor(t, 10*time.Second, "the release record", func() error {
		if !strings.Contains(logs.String(), released) {
			return fmt.Errorf("no %q record", released)
		}
		return nil
	})
	rss, keptRSS := pilotbin.ResidentKiB(t, pid), pilotbin.ResidentKiB(t, keptPID)
	t.Logf("node proxy RSS %d KiB released, %d KiB kept", rss, keptRSS)
	if rss > keptRSS*2/3 {
		t.Errorf("RSS %d KiB after releasing the start-up pages, %d KiB without: want at most two thirds", rss, keptRSS)
	}
	if strings.Contains(keptLogs.String(), released) {
		t.Errorf("--release-startup-pages=false released them:\n%s", keptLogs.String())
	}
}

// nodeProxyPodsYAML is the node proxy DaemonSet's ServiceAccount and its
// Pod on each node, which the proxies' tokens are bound to.
func nodeProxyPodsYAML(nodes ...string) string {
	docs := []string{"apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: ztunnel, namespace: istio-system}\n"}
	for _, n := range nodes {
		docs = append(docs, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: ztunnel-%s, namespace: istio-system}
spec:
  nodeName: %s
  serviceAccountName: ztunnel
  containers: [{name: istio-proxy, image: example/ztunnel}]
`, n, n))
	}
	return strings.Join(docs, "---\n")
}
