package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/internal/xdstest"
)

// istioctlTool runs the real istioctl, built by hack/envtest-assets.sh --istioctl from
// the istio.io/istio version pinned in hack/tools/istioctl, against the
// test API server.
type istioctlTool struct {
	bin        string
	kubeconfig string
}

func newIstioctl(t *testing.T, m *kubeMesh) istioctlTool {
	t.Helper()
	bin := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "istioctl")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("istioctl is not built: run `make test-istioctl`, or hack/envtest-assets.sh --istioctl: %v", err)
	}
	return istioctlTool{bin: bin, kubeconfig: m.kubeconfig}
}

// run returns what istioctl printed on stdout; a non-zero exit fails the
// test with its stderr.
func (ic istioctlTool) run(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ic.bin, append(args, "--kubeconfig", ic.kubeconfig, "--istioNamespace", "istio-system")...)
	// istioctl keeps its settings in $HOME/.istioctl; a test must not read
	// or write the user's.
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("istioctl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String()
}

// table splits istioctl's tabular output into rows of fields. A tabwriter
// aligns the columns, so each column starts where its name starts in the
// header line; an empty field is read as "". The header must have exactly
// the columns named, in order.
func table(t *testing.T, out string, columns ...string) [][]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	header := lines[0]
	var starts []int
	from := 0
	for _, c := range columns {
		i := strings.Index(header[from:], c)
		if i < 0 {
			t.Fatalf("no column %q in the header %q", c, header)
		}
		starts = append(starts, from+i)
		from += i + len(c)
	}
	if strings.TrimSpace(header[from:]) != "" || starts[0] != 0 {
		t.Fatalf("header %q has other columns than %q", header, columns)
	}
	var rows [][]string
	for _, line := range lines[1:] {
		fields := make([]string, len(starts))
		for i, start := range starts {
			end := len(line)
			if i+1 < len(starts) && starts[i+1] < end {
				end = starts[i+1]
			}
			if start < end {
				fields[i] = strings.TrimSpace(line[start:end])
			}
		}
		rows = append(rows, fields)
	}
	return rows
}

// TestIstioctl runs the real istioctl against meshpilot on a real API
// server, with an Envoy-semantics sidecar and a grpc-go client connected:
// proxy-status (and x proxy-status) over xDS on 15010 (plaintext) and on
// 15012 (TLS, with the ServiceAccount token istioctl mints), and
// proxy-config on the config dump from /debug/config_dump, read from the
// monitoring port with a ServiceAccount token, as a remote tool must.
// istioctl's own path to the config dump goes through a port-forward to the
// pod's Envoy admin port, which needs a kubelet, so the dump is handed to it
// as a file (-f), as istioctl offers.
func TestIstioctl(t *testing.T) {
	m := newKubeMesh(t)
	ic := newIstioctl(t, m)
	fx := fixtures{NS: "ictl"}
	m.apply(t, "namespace", fx.render(namespaceYAML))
	m.apply(t, "world", fx.render(sidecarWorldYAML))
	// istioctl mints a token for this ServiceAccount to call 15012;
	// envtest runs no controller that would create it.
	m.apply(t, "service-accounts", "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: default, namespace: istio-system}\n"+
		"---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: default, namespace: ictl}\n")
	m.run(t, "", "patch", "pod", "web-0", "-n", fx.NS, "--subresource=status", "--type=merge",
		"-p", `{"status":{"phase":"Running","podIP":"10.244.0.5","podIPs":[{"ip":"10.244.0.5"}]}}`)
	// The monitoring port listens beyond loopback, as in a pod, so that its
	// debug endpoints ask for a token.
	ip := hostIP(t)
	cp := startControlPlane(t, m, withIdentity("meshpilot-0"), func(o *controlPlaneOptions) {
		o.MonitoringAddr = net.JoinHostPort(ip, "0")
	})
	web, db := "web.ictl.svc.cluster.local", "db.ictl.svc.cluster.local"

	// The sidecar, as Envoy would follow it, reporting its version and
	// cluster as an Istio sidecar's bootstrap does.
	sidecar := sidecarNode(fx.NS)
	sidecar.Metadata.Fields["ISTIO_VERSION"] = structpb.NewStringValue("1.27.0")
	sidecar.Metadata.Fields["CLUSTER_ID"] = structpb.NewStringValue("Kubernetes")
	// It is connected twice, SotW and delta, as when a restarted pod's
	// old stream has not ended yet: proxy-status lists both.
	for _, mode := range []xdstest.Mode{xdstest.SotW, xdstest.Delta} {
		envoy := xdstest.DialEnvoyClient(t, cp.xdsAddr, sidecar, mode)
		envoy.RequireWarm(warmBound, func(s xdstest.Snapshot) error {
			if s.Clusters["outbound|8080||"+web] == nil || s.Listeners["virtualOutbound"] == nil || s.Routes["8080"] == nil {
				return fmt.Errorf("the sidecar has no web cluster, virtualOutbound listener or route 8080 yet")
			}
			return nil
		})
	}

	// A proxyless grpc-go client of db, connected (it resolves lazily). Not
	// of web: web's rule asks for ISTIO_MUTUAL, which a client without a
	// certificate provider in its bootstrap rejects.
	grpcID := nodeID("10.244.0.7", "client-0", fx.NS)
	resolver, err := xds.NewXDSResolverWithConfigForTesting(bootstrapJSON(cp.xdsAddr, grpcID, fx.NS, "10.244.0.7", map[string]string{"app": "client"}))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///"+db+":5432", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(resolver))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	conn.Connect()
	waitFor(t, 30*time.Second, "the grpc-go client to ACK LDS, RDS, CDS and EDS", func() error {
		if s := conn.GetState(); s == connectivity.Shutdown {
			return fmt.Errorf("client state %v", s)
		}
		return allAcked(t, cp, grpcID, 1, 4)
	})
	// Warm means the client has everything; the server records its last
	// ACK just after.
	waitFor(t, 10*time.Second, "the server to see both sidecar connections' ACKs", func() error {
		return allAcked(t, cp, sidecar.GetId(), 2, 4)
	})

	// What every proxy-status variant must print: both proxies, not
	// istioctl's own connection, this control plane's ID, and each proxy's
	// cluster, version and types as it reported them.
	wantRows := [][]string{
		{sidecar.GetId(), "Kubernetes", "meshpilot-0", "1.27.0", "4 (CDS,LDS,EDS,RDS)"},
		{sidecar.GetId(), "Kubernetes", "meshpilot-0", "1.27.0", "4 (CDS,LDS,EDS,RDS)"},
		{grpcID, "", "meshpilot-0", "", "4 (CDS,LDS,EDS,RDS)"},
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"proxy-status on 15010", []string{"proxy-status", "--xds-address", cp.xdsAddr, "--plaintext"}},
		{"x proxy-status on 15010", []string{"x", "proxy-status", "--xds-address", cp.xdsAddr, "--plaintext"}},
		{"proxy-status on 15012 with a ServiceAccount token", []string{"proxy-status", "--xds-address", cp.secureXDSAddr}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := ic.run(t, tc.args...)
			got := table(t, out, "NAME", "CLUSTER", "ISTIOD", "VERSION", "SUBSCRIBED TYPES")
			if !slices.EqualFunc(got, wantRows, slices.Equal) {
				t.Fatalf("istioctl %s printed:\n%s\nwant rows %q", strings.Join(tc.args, " "), out, wantRows)
			}
		})
	}

	monitoring := "http://" + cp.srv.MonitoringAddr().String()
	rootToken := m.createToken(t, "istio-system", "default", "istio-ca")
	getDebug := func(t *testing.T, path, token string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, monitoring+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}

	t.Run("debug on the monitoring port needs a token of istio-system", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			token string
			want  int
		}{
			{"no token", "", http.StatusUnauthorized},
			{"a token of an application namespace", m.createToken(t, "ictl", "default", "istio-ca"), http.StatusForbidden},
			{"a token for another audience", m.createToken(t, "istio-system", "default", "not-istio-ca"), http.StatusUnauthorized},
			{"a token of istio-system", rootToken, http.StatusOK},
		} {
			if code, body := getDebug(t, "/debug/syncz", tc.token); code != tc.want {
				t.Errorf("%s: /debug/syncz answered %d (%s), want %d", tc.name, code, body, tc.want)
			}
		}
		if code, _ := getDebug(t, "/metrics", ""); code != http.StatusOK {
			t.Errorf("/metrics without a token answered %d, want 200", code)
		}
	})

	t.Run("proxy-config from /debug/config_dump on the monitoring port", func(t *testing.T) {
		dumpOf := func(proxyID string) string {
			code, body := getDebug(t, "/debug/config_dump?include_eds=true&proxyID="+url.QueryEscape(proxyID), rootToken)
			if code != http.StatusOK {
				t.Fatalf("config_dump of %s: %d %s", proxyID, code, body)
			}
			path := filepath.Join(t.TempDir(), "config_dump.json")
			if err := os.WriteFile(path, body, 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}
		sidecarDump, grpcDump := dumpOf(sidecar.GetId()), dumpOf(grpcID)
		clusterColumns := []string{"SERVICE FQDN", "PORT", "SUBSET", "DIRECTION", "TYPE", "DESTINATION RULE"}
		cases := []struct {
			name    string
			args    []string
			columns []string
			// rows that must be printed, as istioctl formats them.
			want [][]string
		}{
			{"sidecar clusters", []string{"proxy-config", "cluster", "-f", sidecarDump}, clusterColumns, [][]string{
				{"BlackHoleCluster", "-", "-", "-", "STATIC", ""},
				{"PassthroughCluster", "-", "-", "-", "ORIGINAL_DST", ""},
				{web, "8080", "-", "outbound", "EDS", ""},
				{web, "8080", "v1", "outbound", "EDS", ""},
				{db, "5432", "-", "outbound", "EDS", ""},
			}},
			{"sidecar listeners", []string{"proxy-config", "listener", "-f", sidecarDump}, []string{"ADDRESSES", "PORT", "MATCH", "DESTINATION"}, [][]string{
				{"10.0.0.60", "5432", "ALL", "Cluster: outbound|5432||" + db},
				{"0.0.0.0", "8080", "ALL", "Route: 8080"},
				{"0.0.0.0", "15001", "ALL", "PassthroughCluster"},
				{"0.0.0.0", "15006", "Trans: raw_buffer; Addr: *:8080", "Cluster: inbound|8080||"},
			}},
			{"sidecar routes", []string{"proxy-config", "route", "-f", sidecarDump}, []string{"NAME", "VHOST NAME", "DOMAINS", "MATCH", "VIRTUAL SERVICE"}, [][]string{
				{"8080", "web.ictl.svc.cluster.local:8080", "web, web.ictl + 1 more...", "/*", ""},
			}},
			{"grpc-go client clusters", []string{"proxy-config", "cluster", "-f", grpcDump}, clusterColumns, [][]string{
				{db, "5432", "-", "outbound", "EDS", ""},
			}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				out := ic.run(t, tc.args...)
				got := table(t, out, tc.columns...)
				for _, want := range tc.want {
					if !slices.ContainsFunc(got, func(row []string) bool { return slices.Equal(row, want) }) {
						t.Errorf("istioctl %s printed no row %q:\n%s", strings.Join(tc.args[:2], " "), want, out)
					}
				}
			})
		}
	})
}

// allAcked checks in /debug/syncz that proxyID has conns connections, each
// watching n types and having ACKed the last response of each.
func allAcked(t *testing.T, cp *controlPlane, proxyID string, conns, n int) error {
	t.Helper()
	code, body := cp.get(t, "/debug/syncz")
	if code != http.StatusOK {
		return fmt.Errorf("/debug/syncz: %d %s", code, body)
	}
	var all []struct {
		Proxy     string `json:"proxy"`
		Resources map[string]struct {
			Sent  string `json:"sent"`
			Acked string `json:"acked"`
		} `json:"resources"`
	}
	if err := json.Unmarshal([]byte(body), &all); err != nil {
		return err
	}
	found := 0
	for _, c := range all {
		if c.Proxy != proxyID {
			continue
		}
		found++
		if len(c.Resources) != n {
			return fmt.Errorf("%s watches %d types, want %d", proxyID, len(c.Resources), n)
		}
		for typeURL, r := range c.Resources {
			if r.Sent == "" || r.Sent != r.Acked {
				return fmt.Errorf("%s %s: sent %q, acked %q", proxyID, typeURL, r.Sent, r.Acked)
			}
		}
	}
	if found != conns {
		return fmt.Errorf("%s has %d connections, want %d", proxyID, found, conns)
	}
	return nil
}
