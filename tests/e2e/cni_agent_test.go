package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshpilot/meshpilot/internal/netnstest"
	"github.com/meshpilot/meshpilot/internal/pilotbin"
	"github.com/meshpilot/meshpilot/internal/testlog"
	"github.com/meshpilot/meshpilot/pkg/capture"
	"github.com/meshpilot/meshpilot/pkg/cni/agentapi"
	"github.com/meshpilot/meshpilot/pkg/netns"
	"github.com/meshpilot/meshpilot/pkg/nodeproxy"
)

// TestCNIAgentCapturesPods puts two pods into the mesh as a container
// runtime does: the primary plugin's namespace and address first (made by
// the test), then meshpilot's CNI plugin binary, executed with the CNI
// environment, which asks each node's agent. The test installs no rule and
// writes no annotation itself: A reaches B over HBONE only if the agents
// did both. The two nodes use the two capture backends: nftables on
// node-1, iptables on node-2.
func TestCNIAgentCapturesPods(t *testing.T) {
	fabric, pods := podNetwork(t, 3)
	a, b, c := pods[0], pods[1], pods[2]
	m := newKubeMesh(t)
	cp := startControlPlane(t, m)
	m.apply(t, "cni-world", cniWorldYAML())
	for _, n := range []string{"ztunnel-node-1", "ztunnel-node-2"} {
		setPodIP(t, m, "istio-system", n, netip.MustParseAddr("127.0.0.1"))
	}
	kube := kubeClientFor(t, m)
	for _, p := range []podNet{a, b} {
		startEcho(t, p)
	}
	plugin := buildCNIPlugin(t, m)

	dir := t.TempDir()
	sockets := map[string]string{"node-1": filepath.Join(dir, "node-1.sock"), "node-2": filepath.Join(dir, "node-2.sock")}
	logs := map[string]*testlog.Buffer{"node-1": {}, "node-2": {}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node-1's log:\n%s\nnode-2's log:\n%s", logs["node-1"].String(), logs["node-2"].String())
		}
	})
	// No namespace is named to the proxies: what they serve, they learn
	// from their agents.
	noNetns := map[string]string{}
	backends := map[string]capture.Backend{"node-1": capture.NFTables, "node-2": capture.IPTables}
	startAgent := func(node string) func() {
		_, stop := startNodeProxyWith(t, m, cp, node, noNetns, logs[node], func(o *nodeproxy.Options) {
			o.Kube, o.CNISocket, o.Capture = kube, sockets[node], backends[node]
		})
		waitFor(t, 20*time.Second, node+"'s agent socket", func() error { _, err := os.Stat(sockets[node]); return err })
		return stop
	}
	stopNode1 := startAgent("node-1")
	startAgent("node-2")

	hboneOpen := func(p podNet) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := netns.Dial(ctx, fabric.path, netip.AddrPortFrom(p.ip, nodeproxy.HBONEPort), nil)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := hboneOpen(a); err == nil {
		t.Fatal("A's :15008 answers before any ADD")
	}

	// The runtime's ADD for each pod, on its node; then the kubelet
	// reports the IP, as it does after CNI ADD.
	for _, pc := range []struct {
		p          podNet
		name, node string
	}{{a, "a", "node-1"}, {b, "b", "node-2"}} {
		res := plugin.exec(t, "ADD", pc.p, "cni-demo", pc.name, sockets[pc.node])
		if res.code != 0 {
			t.Fatalf("ADD %s exited %d: %s %s", pc.name, res.code, res.stdout, res.stderr)
		}
		if !strings.Contains(res.stdout, pc.p.ip.String()) {
			t.Errorf("ADD %s did not pass the primary plugin's result through: %s", pc.name, res.stdout)
		}
	}

	t.Run("the rules are in the pods' namespaces and nowhere else", func(t *testing.T) {
		for _, tc := range []struct {
			path          string
			nft, iptables bool
		}{
			{a.path, true, false}, // node-1: nftables
			{b.path, false, true}, // node-2: iptables
			{fabric.path, false, false},
			{"/proc/self/ns/net", false, false},
		} {
			for backend, want := range map[capture.Backend]bool{capture.NFTables: tc.nft, capture.IPTables: tc.iptables} {
				if got, err := backend.Installed(tc.path); err != nil || got != want {
					t.Errorf("%s capture in %s: %v (%v), want %v", backend.Name(), tc.path, got, err, want)
				}
			}
		}
	})
	t.Run("CHECK confirms the capture", func(t *testing.T) {
		for _, pc := range []struct {
			p          podNet
			name, node string
		}{{a, "a", "node-1"}, {b, "b", "node-2"}} {
			if res := plugin.exec(t, "CHECK", pc.p, "cni-demo", pc.name, sockets[pc.node]); res.code != 0 {
				t.Errorf("CHECK %s exited %d: %s %s", pc.name, res.code, res.stdout, res.stderr)
			}
		}
	})
	t.Run("the listeners are open before the Pod has an IP in the API server", func(t *testing.T) {
		for _, p := range []podNet{a, b} {
			if err := hboneOpen(p); err != nil {
				t.Errorf("%s's :15008: %v", p.name, err)
			}
		}
	})
	t.Run("the Pods are annotated", func(t *testing.T) {
		for _, name := range []string{"a", "b"} {
			if got := annotation(t, kube, "cni-demo", name); got != "enabled" {
				t.Errorf("pod %s: %s=%q, want enabled", name, nodeproxy.RedirectionAnnotation, got)
			}
		}
	})

	setPodIP(t, m, "cni-demo", "a", a.ip)
	setPodIP(t, m, "cni-demo", "b", b.ip)
	toB := netip.AddrPortFrom(b.ip, 8080)
	// Until WDS tells node-1 that B has HBONE, A's connections reach B's
	// capture in plaintext; then they go through a tunnel.
	fromA := "peer=spiffe://cluster.local/ns/cni-demo/sa/a"
	waitFor(t, 30*time.Second, "A reaches B over HBONE", func() error {
		if err := echoOnce(a, toB, "warm-up"); err != nil {
			return err
		}
		if !strings.Contains(logs["node-2"].String(), fromA) {
			return errors.New("node-2 logged no tunnel from " + fromA)
		}
		return nil
	})
	t.Run("bytes through the tunnel", func(t *testing.T) {
		if err := echoOnce(a, toB, strings.Repeat("cni ", 50_000)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a running pod joins the mesh by its namespace's label and leaves by its own", func(t *testing.T) {
		// C started before its namespace was ambient: its ADD passed it by.
		if res := plugin.exec(t, "ADD", c, "cni-late", "c", sockets["node-1"]); res.code != 0 {
			t.Fatalf("ADD c exited %d: %s %s", res.code, res.stdout, res.stderr)
		}
		setPodIP(t, m, "cni-late", "c", c.ip)
		if got, err := capture.NFTables.Installed(c.path); err != nil || got {
			t.Fatalf("C captured (%v, %v) though not ambient at its ADD", got, err)
		}

		m.run(t, "", "label", "namespace", "cni-late", "istio.io/dataplane-mode=ambient")
		waitFor(t, 30*time.Second, "C captured while it runs", func() error {
			if ok, err := capture.NFTables.Installed(c.path); err != nil || !ok {
				return fmt.Errorf("no capture in C's namespace (%v)", err)
			}
			if got := annotation(t, kube, "cni-late", "c"); got != "enabled" {
				return fmt.Errorf("C's %s=%q", nodeproxy.RedirectionAnnotation, got)
			}
			return hboneOpen(c)
		})
		fromC := "peer=spiffe://cluster.local/ns/cni-late/sa/c"
		waitFor(t, 30*time.Second, "C reaches B over HBONE", func() error {
			if err := echoOnce(c, toB, "joined"); err != nil {
				return err
			}
			if !strings.Contains(logs["node-2"].String(), fromC) {
				return errors.New("node-2 logged no tunnel from " + fromC)
			}
			return nil
		})

		m.run(t, "", "label", "pod", "c", "-n", "cni-late", "istio.io/dataplane-mode=none")
		waitFor(t, 30*time.Second, "C released while it runs", func() error {
			if ok, err := capture.NFTables.Installed(c.path); err != nil || ok {
				return fmt.Errorf("C's capture is still installed (%v)", err)
			}
			if got := annotation(t, kube, "cni-late", "c"); got != "" {
				return fmt.Errorf("C's %s=%q", nodeproxy.RedirectionAnnotation, got)
			}
			if hboneOpen(c) == nil {
				return errors.New("C's :15008 still answers")
			}
			return nil
		})
		if err := echoOnce(c, toB, "left"); err != nil {
			t.Errorf("C, out of the mesh, cannot reach B: %v", err)
		}
	})

	t.Run("a restarted node proxy serves the captured pod again, rules untouched", func(t *testing.T) {
		addCanary(t, a.path)
		stopNode1()
		if err := echoOnce(a, toB, "while down"); err == nil {
			t.Fatal("A reached B with node-1's proxy down: the capture is not in the path")
		}
		startAgent("node-1")
		waitFor(t, 30*time.Second, "A reaches B after the restart", func() error { return echoOnce(a, toB, "after restart") })
		if !hasCanary(t, a.path) {
			t.Errorf("A's capture table was replaced by the restarted agent")
		}
		if !strings.Contains(logs["node-1"].String(), "captured pod rediscovered") {
			t.Errorf("node-1 did not log the rediscovery")
		}
	})

	t.Run("DEL removes rules, listeners and annotation, and may be repeated", func(t *testing.T) {
		for i := range 2 {
			if res := plugin.exec(t, "DEL", a, "cni-demo", "a", sockets["node-1"]); res.code != 0 {
				t.Fatalf("DEL #%d exited %d: %s %s", i+1, res.code, res.stdout, res.stderr)
			}
		}
		if got, err := capture.NFTables.Installed(a.path); err != nil || got {
			t.Errorf("A's capture after DEL: %v, %v", got, err)
		}
		if err := hboneOpen(a); err == nil {
			t.Errorf("A's :15008 still answers after DEL")
		}
		if got := annotation(t, kube, "cni-demo", "a"); got != "" {
			t.Errorf("A's annotation after DEL: %q", got)
		}
		res := plugin.exec(t, "CHECK", a, "cni-demo", "a", sockets["node-1"])
		if res.code == 0 || !strings.Contains(res.stdout, "pod cni-demo/a is not captured by this node agent") {
			t.Errorf("CHECK after DEL exited %d with %s; want the agent's refusal", res.code, res.stdout)
		}
		// A pod the agent never saw.
		err := agentapi.Call(context.Background(), sockets["node-1"], agentapi.Request{Command: agentapi.CommandDel,
			PodNamespace: "cni-demo", PodName: "never-seen", ContainerID: "x", IfName: "eth0"})
		if err != nil {
			t.Errorf("DEL of a pod never seen: %v", err)
		}
	})

	t.Run("a Pod deleted without a DEL loses its listeners and its capture", func(t *testing.T) {
		// Grace 0 is the kubelet's final delete; there is no kubelet here.
		now := int64(0)
		if err := kube.CoreV1().Pods("cni-demo").Delete(context.Background(), "b", metav1.DeleteOptions{GracePeriodSeconds: &now}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "node-2 to let B go", func() error {
			if hboneOpen(b) == nil {
				return errors.New("B's :15008 still answers")
			}
			if ok, err := capture.IPTables.Installed(b.path); err != nil || ok {
				return fmt.Errorf("B's capture is still installed (%v)", err)
			}
			return nil
		})
	})

	t.Run("an agent that is down fails ADD with a clear error", func(t *testing.T) {
		down := filepath.Join(dir, "down.sock")
		err := agentapi.Call(context.Background(), down, agentapi.Request{Command: agentapi.CommandAdd,
			PodNamespace: "cni-demo", PodName: "a", Netns: a.path, ContainerID: "x", IfName: "eth0"})
		var unreachable *agentapi.UnreachableError
		if !errors.As(err, &unreachable) {
			t.Errorf("Call to a down agent: %v, want an UnreachableError", err)
		}
		res := plugin.exec(t, "ADD", a, "cni-demo", "a", down)
		if res.code == 0 || !strings.Contains(res.stdout+res.stderr, "unreachable") {
			t.Errorf("the plugin's ADD with the agent down exited %d: %s %s", res.code, res.stdout, res.stderr)
		}
		if got, _ := capture.NFTables.Installed(a.path); got {
			t.Errorf("A is captured though its ADD failed")
		}
	})
}

// cniWorldYAML: namespace cni-demo in ambient mode with pods A (node-1)
// and B (node-2), neither annotated: that is the agents' job; and pod C
// (node-1) in cni-late, not in ambient mode yet.
func cniWorldYAML() string {
	pod := func(ns, name, node, sa string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: %s, labels: {app: %s}}\n"+
			"spec:\n  nodeName: %s\n  serviceAccountName: %s\n  containers: [{name: app, image: example/app}]\n", name, ns, name, node, sa)
	}
	return strings.Join([]string{
		"apiVersion: v1\nkind: Namespace\nmetadata: {name: cni-demo, labels: {istio.io/dataplane-mode: ambient}}\n",
		"apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: a, namespace: cni-demo}\n",
		"apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: b, namespace: cni-demo}\n",
		"apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: ztunnel, namespace: istio-system}\n",
		"apiVersion: v1\nkind: Namespace\nmetadata: {name: cni-late}\n",
		"apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: c, namespace: cni-late}\n",
		pod("cni-late", "c", "node-1", "c"),
		pod("cni-demo", "a", "node-1", "a"),
		pod("cni-demo", "b", "node-2", "b"),
		pod("istio-system", "ztunnel-node-1", "node-1", "ztunnel"),
		pod("istio-system", "ztunnel-node-2", "node-2", "ztunnel"),
	}, "---\n")
}

func kubeClientFor(t *testing.T, m *kubeMesh) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", m.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

func annotation(t *testing.T, kube kubernetes.Interface, ns, name string) string {
	t.Helper()
	pod, err := kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod.Annotations[nodeproxy.RedirectionAnnotation]
}

// canaryChain is an empty regular chain (no rule, no hook: it changes no
// packet's path) that the test adds to a pod's capture table. Reinstalling
// the capture replaces the table, and the canary with it.
const canaryChain = "test-canary"

func addCanary(t *testing.T, path string) {
	t.Helper()
	c := netnstest.NFTables(t, path)
	c.AddChain(&nftables.Chain{Name: canaryChain, Table: &nftables.Table{Family: nftables.TableFamilyIPv4, Name: capture.Table}})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
}

func hasCanary(t *testing.T, path string) bool {
	t.Helper()
	chains, err := netnstest.NFTables(t, path).ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range chains {
		if ch.Table.Name == capture.Table && ch.Name == canaryChain {
			return true
		}
	}
	return false
}

// cniPlugin is meshpilot's plugin binary, run as a container runtime runs
// it: only the CNI environment, the chained config on stdin.
type cniPlugin struct{ bin, kubeconfig string }

type cniResult struct {
	code           int
	stdout, stderr string
}

func buildCNIPlugin(t *testing.T, m *kubeMesh) cniPlugin {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "meshpilot-cni")
	if err := os.Symlink(pilotbin.Path(t), bin); err != nil {
		t.Fatal(err)
	}
	return cniPlugin{bin: bin, kubeconfig: m.kubeconfig}
}

func (c cniPlugin) exec(t *testing.T, command string, p podNet, ns, name, socket string) cniResult {
	t.Helper()
	prev := fmt.Sprintf(`{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":%q}],"ips":[{"interface":0,"address":"%s/24"}]}`, p.path, p.ip)
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"k8s-pod-network","type":"meshpilot-cni","kubeconfig":%q,"agentSocket":%q,"agentTimeout":"10s","prevResult":%s}`,
		c.kubeconfig, socket, prev)
	cmd := exec.Command(c.bin)
	cmd.Env = []string{
		"CNI_COMMAND=" + command,
		"CNI_CONTAINERID=sandbox-" + name,
		"CNI_NETNS=" + p.path,
		"CNI_IFNAME=eth0",
		"CNI_PATH=" + filepath.Dir(c.bin),
		fmt.Sprintf("CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s", ns, name),
	}
	cmd.Stdin = strings.NewReader(conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := cniResult{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("exec the plugin: %v", err)
	}
	return res
}
