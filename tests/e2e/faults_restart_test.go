package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/pilotbin"
	"github.com/meshpilot/meshpilot/internal/testlog"
	"github.com/meshpilot/meshpilot/internal/testport"
	"github.com/meshpilot/meshpilot/internal/xdstest"
)

// pilotBinary is a built `pilot discovery` running as its own process, so
// that it can be killed as a node or an OOM killer would kill it.
type pilotBinary struct {
	cmd  *exec.Cmd
	out  *testlog.Buffer
	done chan struct{}
	// cp serves get and the syncz helpers; only its addresses are set.
	cp *controlPlane
}

// startPilotBinary runs bin on the given addresses, serving configDir, and
// waits until it is ready.
func startPilotBinary(t *testing.T, bin, xdsAddr, httpAddr, configDir string, extra ...string) *pilotBinary {
	t.Helper()
	args := append([]string{"discovery", "--config-dir", configDir, "--xds-addr", xdsAddr, "--http-addr", httpAddr,
		"--monitoring-addr", "", "--secure-xds-addr", "", "--webhook-addr", "", "--debounce-after", "20ms"}, extra...)
	p := &pilotBinary{cmd: exec.Command(bin, args...), out: &testlog.Buffer{}, done: make(chan struct{}),
		cp: &controlPlane{xdsAddr: xdsAddr, httpURL: "http://" + httpAddr}}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("pilot (pid %d) log:\n%s", p.cmd.Process.Pid, p.out.String())
		}
	})
	waitFor(t, 60*time.Second, "pilot ready", func() error {
		select {
		case <-p.done:
			return fmt.Errorf("pilot exited: %v\n%s", p.cmd.ProcessState, p.out.String())
		default:
		}
		if code, body := p.cp.get(t, "/ready"); code != http.StatusOK {
			return fmt.Errorf("/ready: %d %s", code, body)
		}
		return nil
	})
	return p
}

func (p *pilotBinary) signal(sig syscall.Signal) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(sig)
	}
}

// exited waits (up to a generous deadline) for the process to end.
func (p *pilotBinary) exited(t *testing.T, within time.Duration) *os.ProcessState {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState
	case <-time.After(within):
		t.Fatalf("pilot still running %v after the signal", within)
		return nil
	}
}

// faultMesh copies the example mesh (a Service with two versions behind it)
// into a directory of its own.
func faultMesh(t *testing.T) string {
	t.Helper()
	repo, err := kubetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join(repo, "examples", "mesh")
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func envoyNodeIn(ns, pod, ip string) *corev3.Node {
	meta, _ := structpb.NewStruct(map[string]any{
		"NAMESPACE": ns, "INSTANCE_IPS": ip, "LABELS": map[string]any{"app": pod},
	})
	return &corev3.Node{Id: nodeID(ip, pod, ns), Metadata: meta}
}

// sentResources is what the control plane's /debug/config_dump says a
// proxy holds: type → name → content hash of the marshalled resource, which
// is the same in any process that generates the same bytes.
func sentResources(t *testing.T, cp *controlPlane, proxyID string) (map[string]map[string]string, error) {
	t.Helper()
	code, body := cp.get(t, "/debug/config_dump?format=meshpilot&proxyID="+url.QueryEscape(proxyID))
	if code != http.StatusOK {
		return nil, fmt.Errorf("config_dump of %s: %d %s", proxyID, code, body)
	}
	var dump struct {
		Types []struct {
			TypeURL   string `json:"typeURL"`
			Resources []struct {
				Name    string `json:"name"`
				Version string `json:"version"`
			} `json:"resources"`
		} `json:"types"`
	}
	if err := json.Unmarshal([]byte(body), &dump); err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for _, ty := range dump.Types {
		out[ty.TypeURL] = map[string]string{}
		for _, r := range ty.Resources {
			out[ty.TypeURL][r.Name] = r.Version
		}
	}
	return out, nil
}

// proxylessClient is a grpc-go channel resolving host through xDS; it
// watches LDS, RDS, CDS and EDS as soon as it connects.
func proxylessClient(t *testing.T, xdsAddr, ns, host string) (proxyID string) {
	t.Helper()
	proxyID = nodeID("127.0.0.1", "client-0", ns)
	resolver, err := xds.NewXDSResolverWithConfigForTesting(bootstrapJSON(xdsAddr, proxyID, ns, "127.0.0.1", map[string]string{"app": "client"}))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///"+host+":7070", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(resolver))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	conn.Connect()
	return proxyID
}

func hasClusters(s xdstest.Snapshot) error {
	if len(s.Clusters) == 0 || len(s.Listeners) == 0 {
		return fmt.Errorf("%d clusters, %d listeners", len(s.Clusters), len(s.Listeners))
	}
	return nil
}

// A control plane killed with SIGKILL leaves its clients with nothing but
// their cached config. A new process on the same address must give every
// one of them the full config again, identical to what the dead one served:
// the grpc-go client (reconnecting by itself) and the Envoy-semantics client
// in both ADS variants, which reconnect as Envoy does: a new stream on the
// same channel, from a client that keeps what it holds and says so (its
// versions, and in delta initial_resource_versions) to a server that knows
// nothing of it.
func TestControlPlaneSurvivesSIGKILL(t *testing.T) {
	dir := faultMesh(t)
	bin := pilotbin.Path(t)
	xdsAddr, httpAddr := testport.Addr(t), testport.Addr(t)
	first := startPilotBinary(t, bin, xdsAddr, httpAddr, dir)

	conn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	nodes := map[xdstest.Mode]*corev3.Node{
		xdstest.SotW:  envoyNodeIn("demo", "web-sotw", "10.244.0.5"),
		xdstest.Delta: envoyNodeIn("demo", "web-delta", "10.244.0.6"),
	}
	envoys := map[xdstest.Mode]*xdstest.EnvoyClient{}
	before := map[xdstest.Mode]xdstest.Snapshot{}
	for mode, node := range nodes {
		envoys[mode] = xdstest.NewEnvoyClient(t, conn, node, mode)
		envoys[mode].RequireWarm(warmBound, hasClusters)
		before[mode] = envoys[mode].Active()
	}
	grpcID := proxylessClient(t, xdsAddr, "demo", "echo.demo.svc.cluster.local")
	waitFor(t, 60*time.Second, "the grpc-go client to ACK LDS, RDS, CDS and EDS", func() error {
		return allAcked(t, first.cp, grpcID, 1, 4)
	})
	servedBefore := map[string]map[string]map[string]string{}
	for _, id := range []string{grpcID, nodes[xdstest.SotW].GetId(), nodes[xdstest.Delta].GetId()} {
		if servedBefore[id], err = sentResources(t, first.cp, id); err != nil {
			t.Fatal(err)
		}
	}

	first.signal(syscall.SIGKILL)
	if st := first.exited(t, 30*time.Second); st.Success() {
		t.Fatalf("pilot exited with %v after SIGKILL", st)
	}
	for mode, c := range envoys {
		waitFor(t, 30*time.Second, mode.String()+" stream to break", func() error {
			if c.Err() == nil {
				return errNotYet
			}
			return nil
		})
	}

	second := startPilotBinary(t, bin, xdsAddr, httpAddr, dir)
	for mode, node := range nodes {
		c := envoys[mode]
		c.Reconnect()
		// What it holds already satisfies RequireWarm: wait for the new
		// process to have answered every type.
		waitFor(t, 60*time.Second, mode.String()+" client to reconnect and ACK every type", func() error {
			return allAcked(t, second.cp, node.GetId(), 1, len(servedBefore[node.GetId()]))
		})
		c.RequireWarm(warmBound, hasClusters)
		if diff := cmp.Diff(before[mode], c.Active(), protocmp.Transform()); diff != "" {
			t.Errorf("%s: config after the restart differs from before (-before +after):\n%s", mode, diff)
		}
	}
	waitFor(t, 60*time.Second, "the grpc-go client to reconnect and ACK LDS, RDS, CDS and EDS", func() error {
		return allAcked(t, second.cp, grpcID, 1, 4)
	})
	for id, want := range servedBefore {
		got, err := sentResources(t, second.cp, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) == 0 {
			t.Fatalf("%s held nothing before the restart: the comparison proves nothing", id)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: resources after the restart differ (-before +after):\n%s", id, diff)
		}
	}
}

// bigMesh writes n Services into dir, enough that one CDS response does not
// fit in a client's 64 KiB flow-control window.
func bigMesh(t *testing.T, dir string, n int) {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata:\n  name: bulk-%d\n  namespace: demo\nspec:\n  ports:\n  - name: http\n    port: 8080\n---\n", i)
	}
	if err := os.WriteFile(filepath.Join(dir, "bulk.yaml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// SIGTERM drains: streams that are connected end cleanly (their clients see
// the stream finish, not a broken connection, and go elsewhere), and a
// stream stuck sending to a client that does not read is cut at
// --shutdown-grace, long before --send-timeout would end it. The process
// then exits 0.
func TestControlPlaneGracefulShutdown(t *testing.T) {
	const (
		grace       = 2 * time.Second
		sendTimeout = 2 * time.Minute
	)
	dir := faultMesh(t)
	bigMesh(t, dir, 1500)
	bin := pilotbin.Path(t)
	xdsAddr, httpAddr := testport.Addr(t), testport.Addr(t)
	p := startPilotBinary(t, bin, xdsAddr, httpAddr, dir,
		"--shutdown-grace", grace.String(), "--send-timeout", sendTimeout.String())

	// A client that asks for every cluster and never reads.
	stuckConn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stuckConn.Close() })
	stuck, err := discoveryv3.NewAggregatedDiscoveryServiceClient(stuckConn).StreamAggregatedResources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	stuckNode := envoyNodeIn("demo", "stuck", "10.244.0.9")
	if err := stuck.Send(&discoveryv3.DiscoveryRequest{Node: stuckNode, TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster"}); err != nil {
		t.Fatal(err)
	}

	healthy := xdstest.DialEnvoyClient(t, xdsAddr, envoyNodeIn("demo", "web", "10.244.0.5"), xdstest.SotW)
	healthy.RequireWarm(warmBound, func(s xdstest.Snapshot) error {
		if len(s.Clusters) < 1500 {
			return fmt.Errorf("%d clusters", len(s.Clusters))
		}
		return nil
	})
	// gRPC takes one message whatever its size, so the stuck stream's first
	// response leaves; the push after it blocks in Send, since the client
	// grants no flow-control window. A response is recorded as sent only
	// once Send returns.
	var first string
	waitFor(t, 30*time.Second, "the stuck client's first CDS response", func() error {
		var err error
		if first, err = cdsSent(t, p.cp, stuckNode.GetId()); err == nil && first == "" {
			return errNotYet
		}
		return err
	})
	bigMesh(t, dir, 1501)
	healthy.RequireWarm(warmBound, func(s xdstest.Snapshot) error {
		if len(s.Clusters) < 1501 {
			return fmt.Errorf("%d clusters", len(s.Clusters))
		}
		return nil
	})
	time.Sleep(time.Second) // not a bound: a second in which a Send that could finish would
	if sent, err := cdsSent(t, p.cp, stuckNode.GetId()); err != nil || sent != first {
		t.Fatalf("the stuck client was sent CDS %q after %q (%v): it is not stuck, so the test proves nothing", sent, first, err)
	}
	signalled := time.Now()

	p.signal(syscall.SIGTERM)
	// The deadline sits between the grace and the send timeout: a drain that
	// waited for the stuck send would miss it.
	if st := p.exited(t, sendTimeout/2); !st.Success() {
		t.Fatalf("pilot exited with %v after SIGTERM, want 0", st)
	}
	t.Logf("exited %v after SIGTERM (grace %v)", time.Since(signalled).Round(time.Millisecond), grace)
	if err := healthy.Err(); !errors.Is(err, io.EOF) {
		t.Errorf("a connected client's stream ended with %v, want a clean end (EOF)", err)
	}
	log := p.out.String()
	for _, want := range []string{"shutting down", "send timed out"} {
		if want == "send timed out" {
			// The stuck send is cut by the grace, not timed out.
			if strings.Contains(log, want) {
				t.Errorf("the stuck stream was ended by --send-timeout, not by --shutdown-grace")
			}
			continue
		}
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	// Nothing listens any more.
	if _, err := (&net.Dialer{Timeout: time.Second}).Dial("tcp", xdsAddr); err == nil {
		t.Errorf("%s still accepts connections after shutdown", xdsAddr)
	}
}

// cdsSent is the nonce of the last CDS response /debug/syncz says proxyID
// was sent ("" for none yet).
func cdsSent(t *testing.T, cp *controlPlane, proxyID string) (string, error) {
	t.Helper()
	code, body := cp.get(t, "/debug/syncz")
	if code != http.StatusOK {
		return "", fmt.Errorf("/debug/syncz: %d %s", code, body)
	}
	var all []struct {
		Proxy     string `json:"proxy"`
		Resources map[string]struct {
			Sent string `json:"sent"`
		} `json:"resources"`
	}
	if err := json.Unmarshal([]byte(body), &all); err != nil {
		return "", err
	}
	for _, c := range all {
		if c.Proxy == proxyID {
			return c.Resources["type.googleapis.com/envoy.config.cluster.v3.Cluster"].Sent, nil
		}
	}
	return "", fmt.Errorf("%s is not connected", proxyID)
}
