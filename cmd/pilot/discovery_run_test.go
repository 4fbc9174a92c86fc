package main

import (
	"bufio"
	"context"
	"encoding/json"
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

// The tests below run `pilot discovery` as a user does, the built binary
// with flags, and observe what its RunE wired: the log on stderr, and the
// push context it serves on /debug/pushcontext.

// world is a directory source with an ingress gateway Service whose http
// port targets 8081, a backend, and two Ingresses: one of class istio, one
// with no class at all.
const world = `apiVersion: v1
kind: Namespace
metadata: {name: istio-system}
---
apiVersion: v1
kind: Service
metadata: {name: my-gateway, namespace: istio-system, labels: {istio: ingressgateway}}
spec:
  clusterIP: 10.96.0.10
  ports: [{name: http, port: 80, targetPort: 8081}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: 10.96.0.20
  ports: [{name: http, port: 80}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: classed, namespace: default, annotations: {kubernetes.io/ingress.class: istio}}
spec:
  rules: [{http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: unclassed, namespace: default}
spec:
  rules: [{http: {paths: [{path: /b, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}}]
`

func TestMain(m *testing.M) { os.Exit(pilotbin.Main(m)) }

type runningPilot struct {
	httpAddr string
	stderr   *testlog.Buffer
	pid      int
}

// startDiscovery runs pilot discovery on the world with args, on free
// ports, until the test ends, and waits for /ready.
func startDiscovery(t *testing.T, env []string, args ...string) *runningPilot {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "world.yaml"), []byte(world), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &runningPilot{httpAddr: testport.Addr(t), stderr: &testlog.Buffer{}}
	all := append([]string{"discovery", "--config-dir", dir, "--xds-addr", testport.Addr(t),
		"--http-addr", p.httpAddr, "--monitoring-addr", ""}, args...)
	cmd := exec.Command(pilotbin.Path(t), all...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.pid = cmd.Process.Pid
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + p.httpAddr + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pilot discovery %v not ready: %v\n%s", args, err, p.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ingress is the Ingress part of /debug/pushcontext.
func (p *runningPilot) ingress(t *testing.T) (owned, ignored int, httpPort uint32) {
	t.Helper()
	resp, err := http.Get("http://" + p.httpAddr + "/debug/pushcontext")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var summary struct {
		Ingress struct {
			Owned    int    `json:"owned"`
			Ignored  int    `json:"ignored"`
			HTTPPort uint32 `json:"httpPort"`
		} `json:"ingress"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&summary); err != nil {
		t.Fatal(err)
	}
	return summary.Ingress.Owned, summary.Ingress.Ignored, summary.Ingress.HTTPPort
}

func TestDiscoveryLogging(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		// check judges the stderr lines.
		check func(lines []string) error
	}{
		{"json", []string{"--log-format", "json", "--log-level", "debug"}, func(lines []string) error {
			var started bool
			for _, l := range lines {
				var rec map[string]any
				if err := json.Unmarshal([]byte(l), &rec); err != nil {
					return fmt.Errorf("not a JSON line: %q", l)
				}
				started = started || (rec["msg"] == "starting meshpilot" && rec["level"] == "INFO")
			}
			if !started {
				return fmt.Errorf("no JSON start record in %q", lines)
			}
			return nil
		}},
		{"text at warn", []string{"--log-format", "text", "--log-level", "warn"}, func(lines []string) error {
			for _, l := range lines {
				if strings.Contains(l, "level=INFO") || strings.Contains(l, "level=DEBUG") {
					return fmt.Errorf("a record below warn: %q", l)
				}
				if !strings.HasPrefix(l, "time=") {
					return fmt.Errorf("not a text record: %q", l)
				}
			}
			return nil
		}},
		{"text at info says it started", []string{"--log-level", "info"}, func(lines []string) error {
			for _, l := range lines {
				if strings.Contains(l, `msg="starting meshpilot"`) {
					return nil
				}
			}
			return fmt.Errorf("no start record in %q", lines)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startDiscovery(t, nil, tc.args...)
			if err := tc.check(p.stderrLines()); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestDiscoveryReleasesStartupPages: once serving, pilot holds a fraction of
// the RSS it would with every page start-up touched, and says so; with
// --release-startup-pages=false it keeps them.
func TestDiscoveryReleasesStartupPages(t *testing.T) {
	const released = "released the executable's start-up pages"
	kept := startDiscovery(t, nil, "--release-startup-pages=false")
	p := startDiscovery(t, nil)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.stderr.String(), released) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q record:\n%s", released, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	rss, keptRSS := pilotbin.ResidentKiB(t, p.pid), pilotbin.ResidentKiB(t, kept.pid)
	t.Logf("RSS %d KiB released, %d KiB kept", rss, keptRSS)
	if rss > keptRSS*2/3 {
		t.Errorf("RSS %d KiB after releasing the start-up pages, %d KiB without: want at most two thirds", rss, keptRSS)
	}
	if strings.Contains(kept.stderr.String(), released) {
		t.Errorf("--release-startup-pages=false released them:\n%s", kept.stderr.String())
	}
}

func TestDiscoveryIngressWiring(t *testing.T) {
	meshConfig := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(meshConfig, []byte("ingressControllerMode: DEFAULT\ningressService: my-gateway\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name           string
		args           []string
		owned, ignored int
		httpPort       uint32
	}{
		// The default gateway Service, istio-system/istio-ingressgateway, is
		// absent here: no gateway port is known.
		{"defaults: STRICT, only the classed Ingress", nil, 1, 1, 0},
		{"--ingress-controller-mode DEFAULT takes unclassed ones too",
			[]string{"--ingress-controller-mode", "DEFAULT"}, 2, 0, 0},
		{"--ingress-controller-mode is case-insensitive",
			[]string{"--ingress-controller-mode", "default"}, 2, 0, 0},
		{"--ingress-service names the gateway, whose target port is listened on",
			[]string{"--ingress-service", "istio-system/my-gateway"}, 1, 1, 8081},
		{"--mesh-config sets both", []string{"--mesh-config", meshConfig}, 2, 0, 8081},
		{"an explicit flag wins over --mesh-config",
			[]string{"--mesh-config", meshConfig, "--ingress-controller-mode", "STRICT"}, 1, 1, 8081},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startDiscovery(t, nil, tc.args...)
			owned, ignored, port := p.ingress(t)
			if owned != tc.owned || ignored != tc.ignored || port != tc.httpPort {
				t.Errorf("owned %d, ignored %d, gateway http port %d; want %d, %d, %d",
					owned, ignored, port, tc.owned, tc.ignored, tc.httpPort)
			}
		})
	}
}

// TestDiscoverySourceChoice: with no source flag, pilot uses the pod's
// service account when it runs in a cluster, and otherwise says what to
// set.
func TestDiscoverySourceChoice(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"outside a cluster", []string{"KUBERNETES_SERVICE_HOST=", "KUBERNETES_SERVICE_PORT="},
			"no config source: set --config-dir, --kubeconfig, or run in a cluster"},
		// In a pod the service account's files are read; here there are
		// none, so the attempt shows in the error.
		{"in a cluster", []string{"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=1"},
			"/var/run/secrets/kubernetes.io/serviceaccount/token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/token"); err == nil {
				t.Fatal("this machine has a service account token; the test would reach a real cluster")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, pilotbin.Path(t), "discovery", "--xds-addr", testport.Addr(t), "--http-addr", "", "--monitoring-addr", "")
			cmd.Env = append(os.Environ(), tc.env...)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("started without a source:\n%s", out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("output does not say %q:\n%s", tc.want, out)
			}
		})
	}
}

// stderrLines are the non-empty lines the child wrote to stderr so far.
func (p *runningPilot) stderrLines() []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}
