package plugin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/netnstest"
	"github.com/meshpilot/meshpilot/internal/pilotbin"
	"github.com/meshpilot/meshpilot/pkg/cni/agentapi"
)

func TestMain(m *testing.M) { os.Exit(pilotbin.Main(m)) }

// installPlugin puts pilot in a directory of CNI plugins under the name an
// installer gives it, so that it is run the way a runtime runs a plugin.
func installPlugin(t *testing.T) string {
	t.Helper()
	plugin := filepath.Join(t.TempDir(), "meshpilot-cni")
	if err := os.Symlink(pilotbin.Path(t), plugin); err != nil {
		t.Fatal(err)
	}
	return plugin
}

// runtime holds what a container runtime would have for one test: the
// plugin's conf, a pod sandbox's netns, and the pods in a real API server.
type runtime struct {
	t          *testing.T
	plugin     string
	kubeconfig string
	netns      string
}

type execResult struct {
	code   int
	stdout []byte
	stderr string
}

// exec runs the plugin binary with only the CNI environment a runtime sets.
func (r *runtime) exec(command, cniArgs string, conf []byte) execResult {
	r.t.Helper()
	cmd := exec.Command(r.plugin)
	cmd.Env = []string{
		"CNI_COMMAND=" + command,
		"CNI_CONTAINERID=sandbox-" + strings.ReplaceAll(r.t.Name(), "/", "-"),
		"CNI_NETNS=" + r.netns,
		"CNI_IFNAME=eth0",
		"CNI_PATH=" + filepath.Dir(r.plugin),
		"CNI_ARGS=" + cniArgs,
	}
	cmd.Stdin = bytes.NewReader(conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := execResult{stdout: stdout.Bytes(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		res.code = ee.ExitCode()
	} else if err != nil {
		r.t.Fatalf("exec plugin: %v", err)
	}
	return res
}

func podArgs(ns, name string) string {
	return fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=abc", ns, name)
}

const prevResult100 = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","mac":"0a:58:0a:01:00:05","sandbox":"/var/run/netns/x"}],` +
	`"ips":[{"interface":0,"address":"10.1.0.5/24","gateway":"10.1.0.1"},{"interface":0,"address":"fd00::5/64"}],` +
	`"routes":[{"dst":"0.0.0.0/0"}],"dns":{"nameservers":["10.96.0.10"]}}`

const prevResult040 = `{"cniVersion":"0.4.0","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/x"}],` +
	`"ips":[{"version":"4","interface":0,"address":"10.1.0.6/24"}]}`

// conf is a chained plugin entry as the runtime hands it over.
func conf(version, kubeconfig, socket, prev string) []byte {
	c := map[string]any{"cniVersion": version, "name": "k8s-pod-network", "type": "meshpilot-cni",
		"kubeconfig": kubeconfig, "agentSocket": socket, "agentTimeout": "5s",
		"excludeNamespaces": []string{"kube-system"}}
	if prev != "" {
		c["prevResult"] = json.RawMessage(prev)
	}
	b, _ := json.Marshal(c)
	return b
}

// agent is a node agent stand-in on a real socket, recording requests.
func agent(t *testing.T, refuse error) (socket string, got chan agentapi.Request) {
	t.Helper()
	dir, err := os.MkdirTemp("", "cniagent") // short: socket paths max 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket = filepath.Join(dir, "cni.sock")
	l, err := agentapi.Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	got = make(chan agentapi.Request, 10)
	done := make(chan error, 1)
	go func() {
		done <- agentapi.Serve(l, agentapi.HandlerFunc(func(_ context.Context, r agentapi.Request) error {
			got <- r
			return refuse
		}))
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return socket, got
}

func noCall(t *testing.T, got chan agentapi.Request) {
	t.Helper()
	select {
	case r := <-got:
		t.Errorf("agent was called for a pod outside the mesh: %+v", r)
	default:
	}
}

func jsonEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("result is not JSON: %v: %s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("result changed the prevResult:\n got %s\nwant %s", got, want)
	}
}

func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["plugin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "plugin"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPluginAsARuntimeRunsIt execs the built plugin with the CNI
// environment and a chained config, for pods that live in a real API
// server, and a sandbox that is a real network namespace.
func TestPluginAsARuntimeRunsIt(t *testing.T) {
	netnstest.RequireRoot(t)
	env := kubetest.StartWithoutCRDs(t)
	sandbox, _ := netnstest.Pair(t) // the primary plugin's veth is in place
	r := &runtime{t: t, plugin: installPlugin(t), kubeconfig: writeKubeconfig(t, env.Config), netns: sandbox.Path}

	ctx := context.Background()
	ambientNS := env.Namespace(t, "ambient")
	plainNS := env.Namespace(t, "plain")
	nsObj, err := env.Kube.CoreV1().Namespaces().Get(ctx, ambientNS, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nsObj.Labels["istio.io/dataplane-mode"] = "ambient"
	if _, err := env.Kube.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	uids := map[string]string{}
	mkPod := func(ns, name string, labels map[string]string) {
		p, err := env.Kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[ns+"/"+name] = string(p.UID)
	}
	mkPod(ambientNS, "by-namespace", nil)
	mkPod(ambientNS, "opted-out", map[string]string{"istio.io/dataplane-mode": "none"})
	mkPod(plainNS, "by-label", map[string]string{"istio.io/dataplane-mode": "ambient"})
	mkPod(plainNS, "outside", nil)

	t.Run("ADD of an ambient pod waits for the agent and passes the result through", func(t *testing.T) {
		for _, tc := range []struct {
			version, prev, ns, pod string
			ips                    []string
		}{
			{"1.0.0", prevResult100, ambientNS, "by-namespace", []string{"10.1.0.5", "fd00::5"}},
			{"0.4.0", prevResult040, plainNS, "by-label", []string{"10.1.0.6"}},
		} {
			socket, got := agent(t, nil)
			res := r.exec("ADD", podArgs(tc.ns, tc.pod), conf(tc.version, r.kubeconfig, socket, tc.prev))
			if res.code != 0 {
				t.Fatalf("%s ADD %s/%s exited %d: %s %s", tc.version, tc.ns, tc.pod, res.code, res.stdout, res.stderr)
			}
			jsonEqual(t, res.stdout, tc.prev)
			var req agentapi.Request
			select {
			case req = <-got:
			default:
				t.Fatalf("ADD of ambient pod %s/%s returned without asking the agent", tc.ns, tc.pod)
			}
			var ips []string
			for _, a := range req.PodIPs {
				ips = append(ips, a.String())
			}
			if req.Command != agentapi.CommandAdd || req.PodNamespace != tc.ns || req.PodName != tc.pod ||
				req.PodUID != uids[tc.ns+"/"+tc.pod] || req.Netns != sandbox.Path || req.IfName != "eth0" ||
				!strings.HasPrefix(req.ContainerID, "sandbox-") || !reflect.DeepEqual(ips, tc.ips) {
				t.Errorf("agent got %+v (ips %v); want ADD of %s/%s uid %s in %s with ips %v",
					req, ips, tc.ns, tc.pod, uids[tc.ns+"/"+tc.pod], sandbox.Path, tc.ips)
			}
		}
	})

	t.Run("pods outside the mesh are passed through without the agent", func(t *testing.T) {
		socket, got := agent(t, nil)
		for _, args := range []string{
			podArgs(ambientNS, "opted-out"),
			podArgs(plainNS, "outside"),
			podArgs("kube-system", "not-even-looked-up"),
			"IgnoreUnknown=1", // not a Kubernetes pod
		} {
			res := r.exec("ADD", args, conf("1.0.0", r.kubeconfig, socket, prevResult100))
			if res.code != 0 {
				t.Errorf("ADD %s exited %d: %s %s", args, res.code, res.stdout, res.stderr)
			}
			jsonEqual(t, res.stdout, prevResult100)
		}
		noCall(t, got)
	})

	t.Run("ADD of an ambient pod fails clearly when the agent is down", func(t *testing.T) {
		socket := filepath.Join(t.TempDir(), "no-agent.sock")
		res := r.exec("ADD", podArgs(ambientNS, "by-namespace"), conf("1.0.0", r.kubeconfig, socket, prevResult100))
		if res.code == 0 {
			t.Fatalf("ADD succeeded with no agent: %s", res.stdout)
		}
		var cniErr struct {
			Code uint   `json:"code"`
			Msg  string `json:"msg"`
		}
		if err := json.Unmarshal(res.stdout, &cniErr); err != nil {
			t.Fatalf("stdout is not a CNI error: %v: %q", err, res.stdout)
		}
		want := "meshpilot node agent unreachable at " + socket + ": pod not started without its capture"
		if cniErr.Code != 11 || cniErr.Msg != want {
			t.Errorf("CNI error %+v, want code 11 (try again later) and msg %q", cniErr, want)
		}
		// Outside the mesh, the same missing agent changes nothing.
		res = r.exec("ADD", podArgs(plainNS, "outside"), conf("1.0.0", r.kubeconfig, socket, prevResult100))
		if res.code != 0 {
			t.Errorf("ADD of a pod outside the mesh failed for a missing agent: %s", res.stdout)
		}
	})

	t.Run("ADD fails with the agent's reason when it refuses", func(t *testing.T) {
		socket, _ := agent(t, fmt.Errorf("nftables: permission denied"))
		res := r.exec("ADD", podArgs(ambientNS, "by-namespace"), conf("1.0.0", r.kubeconfig, socket, prevResult100))
		if res.code == 0 || !bytes.Contains(res.stdout, []byte("nftables: permission denied")) {
			t.Errorf("ADD exited %d with %s; want a failure carrying the agent's reason", res.code, res.stdout)
		}
	})

	t.Run("DEL tells the agent, and succeeds without it", func(t *testing.T) {
		socket, got := agent(t, nil)
		res := r.exec("DEL", podArgs(ambientNS, "by-namespace"), conf("1.0.0", r.kubeconfig, socket, ""))
		if res.code != 0 {
			t.Fatalf("DEL exited %d: %s", res.code, res.stdout)
		}
		select {
		case req := <-got:
			if req.Command != agentapi.CommandDel || req.PodName != "by-namespace" || req.Netns != sandbox.Path {
				t.Errorf("agent got %+v, want DEL of by-namespace", req)
			}
		case <-time.After(time.Second):
			t.Error("DEL of an ambient pod did not tell the agent")
		}
		for _, pod := range []string{"by-namespace", "deleted-already"} {
			gone := filepath.Join(t.TempDir(), "no-agent.sock")
			res = r.exec("DEL", podArgs(ambientNS, pod), conf("1.0.0", r.kubeconfig, gone, ""))
			if res.code != 0 || len(bytes.TrimSpace(res.stdout)) != 0 {
				t.Errorf("DEL of %s with the agent down exited %d with %q; DEL must be idempotent", pod, res.code, res.stdout)
			}
			if !strings.Contains(res.stderr, "node agent not told") {
				t.Errorf("DEL with the agent down logged %q; want the reason logged", res.stderr)
			}
		}
	})

	t.Run("CHECK asks the agent about ambient pods only", func(t *testing.T) {
		okSocket, okGot := agent(t, nil)
		brokenSocket, _ := agent(t, fmt.Errorf("capture rules missing in %s", sandbox.Path))
		down := filepath.Join(t.TempDir(), "no-agent.sock")
		for _, tc := range []struct {
			name, args, socket string
			// wantMsg is empty for a CHECK that passes.
			wantMsg string
		}{
			{"ambient pod, capture whole", podArgs(ambientNS, "by-namespace"), okSocket, ""},
			{"ambient pod, capture broken", podArgs(ambientNS, "by-namespace"), brokenSocket,
				"meshpilot node agent could not confirm the capture of pod " + ambientNS + "/by-namespace: capture rules missing in " + sandbox.Path},
			{"ambient pod, agent down", podArgs(plainNS, "by-label"), down,
				"meshpilot node agent unreachable at " + down + ": the capture cannot be confirmed"},
			{"pod outside the mesh, agent down", podArgs(plainNS, "outside"), down, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				res := r.exec("CHECK", tc.args, conf("1.0.0", r.kubeconfig, tc.socket, prevResult100))
				if tc.wantMsg == "" {
					if res.code != 0 || len(bytes.TrimSpace(res.stdout)) != 0 {
						t.Errorf("CHECK exited %d with %q, want success and no output", res.code, res.stdout)
					}
					return
				}
				var cniErr struct {
					Msg string `json:"msg"`
				}
				if err := json.Unmarshal(res.stdout, &cniErr); res.code == 0 || err != nil || cniErr.Msg != tc.wantMsg {
					t.Errorf("CHECK exited %d with %s, want the error %q", res.code, res.stdout, tc.wantMsg)
				}
			})
		}
		select {
		case req := <-okGot:
			if req.Command != agentapi.CommandCheck || req.PodName != "by-namespace" || req.Netns != sandbox.Path {
				t.Errorf("agent got %+v, want CHECK of by-namespace in %s", req, sandbox.Path)
			}
		default:
			t.Error("CHECK of an ambient pod did not ask the agent")
		}
	})

	t.Run("VERSION lists every version with chaining", func(t *testing.T) {
		res := r.exec("VERSION", "", []byte(`{"cniVersion":"1.0.0"}`))
		var v struct {
			SupportedVersions []string `json:"supportedVersions"`
		}
		if err := json.Unmarshal(res.stdout, &v); err != nil || res.code != 0 {
			t.Fatalf("VERSION exited %d: %s (%v)", res.code, res.stdout, err)
		}
		if want := []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}; !reflect.DeepEqual(v.SupportedVersions, want) {
			t.Errorf("supportedVersions %v, want %v", v.SupportedVersions, want)
		}
	})

	t.Run("ADD without a prevResult is a broken chain", func(t *testing.T) {
		res := r.exec("ADD", podArgs(plainNS, "outside"), conf("1.0.0", r.kubeconfig, "/nonexistent", ""))
		if res.code == 0 || !bytes.Contains(res.stdout, []byte("must be chained")) {
			t.Errorf("ADD without prevResult exited %d with %s", res.code, res.stdout)
		}
	})
}

const prevResult031 = `{"cniVersion":"0.3.1","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/x"}],` +
	`"ips":[{"version":"4","interface":0,"address":"10.1.0.7/24"}],"dns":{}}`

const prevResult110 = `{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/x"}],` +
	`"ips":[{"interface":0,"address":"10.1.0.8/24"}],"dns":{}}`

// TestPluginSpeaksTheConflistsVersion runs the plugin with the versions
// that nodes' conflists declare. The runtime hands every chained plugin
// the list's version, and a version the plugin refuses fails the pod, so
// on a node whose primary plugin writes 0.3.1 (Calico, Flannel, Cilium)
// or 1.1.0 every pod would fail to start, kube-system's too. The pods here
// need neither the API server nor the agent: one is in an excluded
// namespace, one is no Kubernetes pod.
func TestPluginSpeaksTheConflistsVersion(t *testing.T) {
	r := &runtime{t: t, plugin: installPlugin(t), kubeconfig: "/nonexistent", netns: "/var/run/netns/x"}
	for _, tc := range []struct{ version, prev string }{
		{"0.3.1", prevResult031},
		{"0.4.0", prevResult040},
		{"1.0.0", prevResult100},
		{"1.1.0", prevResult110},
	} {
		t.Run(tc.version, func(t *testing.T) {
			for _, args := range []string{podArgs("kube-system", "coredns"), "IgnoreUnknown=1"} {
				res := r.exec("ADD", args, conf(tc.version, r.kubeconfig, "/nonexistent", tc.prev))
				if res.code != 0 {
					t.Fatalf("ADD %s exited %d: %s %s", args, res.code, res.stdout, res.stderr)
				}
				jsonEqual(t, res.stdout, tc.prev)
				res = r.exec("DEL", args, conf(tc.version, r.kubeconfig, "/nonexistent", ""))
				if res.code != 0 {
					t.Errorf("DEL %s exited %d: %s", args, res.code, res.stdout)
				}
			}
		})
	}
	// 1.1.0's own commands answer, as a runtime asks them of every plugin
	// of the list.
	for _, cmd := range []string{"GC", "STATUS"} {
		res := r.exec(cmd, "", conf("1.1.0", r.kubeconfig, "/nonexistent", ""))
		if res.code != 0 || len(bytes.TrimSpace(res.stdout)) != 0 {
			t.Errorf("%s exited %d with %q, want success and no output", cmd, res.code, res.stdout)
		}
	}
}
