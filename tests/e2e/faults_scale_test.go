package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshpilot/meshpilot/internal/pilotbin"
	"github.com/meshpilot/meshpilot/internal/testport"
)

const (
	scaleStreams  = 500
	scaleServices = 200
	// longEnv turns the minute-long soak on; `make test` runs a few seconds
	// of churn with the same streams.
	longEnv = "MESHPILOT_TEST_LONG"
)

const (
	cdsType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	edsType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	ldsType = "type.googleapis.com/envoy.config.listener.v3.Listener"
)

// TestManyStreamsThroughChurn holds 500 sidecar streams (each on its own
// connection, CDS and LDS wildcard, EDS for every cluster) on the built
// pilot while the endpoints of 200 Services change, then checks that every
// stream ends with exactly the final endpoints. It reports the control
// plane's peak RSS and peak heap: figures, not assertions.
// MESHPILOT_TEST_LONG=1 churns for a minute instead of a few seconds.
func TestManyStreamsThroughChurn(t *testing.T) {
	churnFor := 3 * time.Second
	if os.Getenv(longEnv) == "1" {
		churnFor = time.Minute
	}
	dir := t.TempDir()
	var svcs strings.Builder
	svcs.WriteString("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: scale\n---\n")
	for i := range scaleServices {
		fmt.Fprintf(&svcs, "apiVersion: v1\nkind: Service\nmetadata:\n  name: svc-%d\n  namespace: scale\nspec:\n  ports:\n  - name: http\n    port: 8080\n---\n", i)
		writeScaleSlice(t, dir, i, 0)
	}
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(svcs.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	bin := pilotbin.Path(t)
	xdsAddr, httpAddr, monAddr := testport.Addr(t), testport.Addr(t), testport.Addr(t)
	p := startPilotBinary(t, bin, xdsAddr, httpAddr, dir, "--monitoring-addr", monAddr, "--enable-profiling")

	peakHeap := &atomic.Int64{}
	stopSampling := sampleHeap(t, "http://"+monAddr+"/metrics", peakHeap)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clients := make([]*scaleClient, scaleStreams)
	for i := range clients {
		clients[i] = startScaleClient(ctx, t, xdsAddr, fmt.Sprintf("web-%d", i))
	}
	// Every stream is up and has every Service's endpoints.
	waitFor(t, 5*time.Minute, "every stream to hold every Service's endpoints", func() error {
		for _, c := range clients {
			if err := c.failed(); err != nil {
				return err
			}
			if n := c.loadAssignments(); n < scaleServices {
				return fmt.Errorf("%s holds %d load assignments", c.name, n)
			}
		}
		return nil
	})

	// Churn: a random Service's slice is rewritten every 20ms.
	final := map[int]int{}
	rounds := 0
	for deadline := time.Now().Add(churnFor); time.Now().Before(deadline); rounds++ {
		i := rand.N(scaleServices)
		final[i] = rounds + 1
		writeScaleSlice(t, dir, i, rounds+1)
		time.Sleep(20 * time.Millisecond)
	}
	lastWrite := time.Now()
	want := map[string][]string{}
	for i := range scaleServices {
		want[fmt.Sprintf("outbound|8080||svc-%d.scale.svc.cluster.local", i)] = scaleAddresses(i, final[i])
	}
	waitFor(t, 2*time.Minute, "every stream to converge on the final endpoints", func() error {
		for _, c := range clients {
			if err := c.failed(); err != nil {
				return err
			}
			if err := c.holds(want); err != nil {
				return err
			}
		}
		return nil
	})
	converged := time.Since(lastWrite)
	stopSampling()
	if code, _ := p.cp.get(t, "/ready"); code != http.StatusOK {
		t.Errorf("/ready answered %d after the churn", code)
	}
	t.Logf("%d streams, %d services, %d slice rewrites over %v: all converged %v after the last write; "+
		"control plane peak RSS %d MiB, peak heap in use %d MiB",
		scaleStreams, scaleServices, rounds, churnFor, converged.Round(time.Millisecond),
		peakRSS(t, p.cmd.Process.Pid)>>20, peakHeap.Load()>>20)
	if path := os.Getenv("MESHPILOT_TEST_HEAP_PROFILE"); path != "" {
		saveHeapProfile(t, p.cp.httpURL+"/debug/pprof/heap", path)
	}
}

// scaleAddresses are Service i's endpoint addresses at a round: two
// documentation-range addresses that differ every round.
func scaleAddresses(i, round int) []string {
	a := []string{
		fmt.Sprintf("198.51.%d.%d", 100+i%4, 1+round%250),
		fmt.Sprintf("203.0.%d.%d", 113, 1+(i+round)%250),
	}
	slices.Sort(a)
	return a
}

// writeScaleSlice replaces Service i's EndpointSlice file at once (rename),
// so the watcher never reads half a file.
func writeScaleSlice(t *testing.T, dir string, i, round int) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: svc-%d\n  namespace: scale\n"+
		"  labels:\n    kubernetes.io/service-name: svc-%d\naddressType: IPv4\nports:\n- name: http\n  port: 8080\nendpoints:\n", i, i)
	for _, a := range scaleAddresses(i, round) {
		fmt.Fprintf(&b, "- addresses: [%q]\n  conditions: {ready: true}\n", a)
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".slice-%d.tmp", i))
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("slice-%d.yaml", i))); err != nil {
		t.Fatal(err)
	}
}

// scaleClient is a light sidecar-like SotW client: CDS and LDS wildcard,
// EDS for every EDS cluster, every response ACKed. It keeps only the
// endpoint addresses, so that 500 of them fit beside the control plane.
type scaleClient struct {
	name string
	mu   sync.Mutex
	eds  map[string][]string
	err  error
}

func startScaleClient(ctx context.Context, t *testing.T, xdsAddr, pod string) *scaleClient {
	t.Helper()
	conn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &scaleClient{name: pod, eds: map[string][]string{}}
	node := envoyNodeIn("scale", pod, "10.244.1.1")
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: cdsType}); err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: ldsType}); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := c.follow(stream)
		c.mu.Lock()
		c.err = fmt.Errorf("%s: stream ended: %w", pod, err)
		c.mu.Unlock()
	}()
	return c
}

func (c *scaleClient) follow(stream grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]) error {
	var edsNames []string
	var edsVersion, edsNonce string
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		var names []string
		switch resp.GetTypeUrl() {
		case cdsType:
			var want []string
			for _, a := range resp.GetResources() {
				cl := &clusterv3.Cluster{}
				if err := a.UnmarshalTo(cl); err != nil {
					return err
				}
				if cl.GetType() == clusterv3.Cluster_EDS {
					want = append(want, cmpOr(cl.GetEdsClusterConfig().GetServiceName(), cl.GetName()))
				}
			}
			slices.Sort(want)
			if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: cdsType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
				return err
			}
			if !slices.Equal(want, edsNames) {
				edsNames = want
				if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: edsType, VersionInfo: edsVersion, ResponseNonce: edsNonce, ResourceNames: edsNames}); err != nil {
					return err
				}
			}
			continue
		case edsType:
			for _, a := range resp.GetResources() {
				cla := &endpointv3.ClusterLoadAssignment{}
				if err := a.UnmarshalTo(cla); err != nil {
					return err
				}
				c.mu.Lock()
				c.eds[cla.GetClusterName()] = claAddresses(cla)
				c.mu.Unlock()
			}
			edsVersion, edsNonce, names = resp.GetVersionInfo(), resp.GetNonce(), edsNames
		}
		if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(),
			ResponseNonce: resp.GetNonce(), ResourceNames: names}); err != nil {
			return err
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (c *scaleClient) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *scaleClient) loadAssignments() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.eds)
}

func (c *scaleClient) holds(want map[string][]string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for cluster, addrs := range want {
		if got := c.eds[cluster]; !slices.Equal(got, addrs) {
			return fmt.Errorf("%s: %s has %v, want %v", c.name, cluster, got, addrs)
		}
	}
	return nil
}

// sampleHeap polls go_memstats_heap_inuse_bytes every 100ms and keeps the
// largest value until the returned function is called.
func sampleHeap(t *testing.T, metricsURL string, peak *atomic.Int64) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			if v := heapInUse(metricsURL); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(done); <-stopped }) }
	t.Cleanup(stop)
	return stop
}

func heapInUse(metricsURL string) int64 {
	resp, err := http.Get(metricsURL)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_inuse_bytes "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return int64(f)
		}
	}
	return 0
}

// peakRSS is the process's high-water resident set (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

func saveHeapProfile(t *testing.T, url, path string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
}
