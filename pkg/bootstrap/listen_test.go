package bootstrap

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshpilot/meshpilot/internal/kubetest"
)

// portCase takes a port that something else holds and gives it to one
// listener; the error must name the flag that moves that listener.
type portCase struct {
	flag string
	set  func(o *Options, addr string)
}

// TestPortConflictNamesFlag: each listener of the directory-only control
// plane, started on a port already in use, fails with the flag that sets it.
func TestPortConflictNamesFlag(t *testing.T) {
	runPortConflicts(t, func(t *testing.T) Options {
		o := localOptions(t)
		o.ConfigDir = t.TempDir()
		return o
	}, []portCase{
		{"--xds-addr", func(o *Options, a string) { o.XDSAddr = a }},
		{"--http-addr", func(o *Options, a string) { o.HTTPAddr = a }},
		{"--monitoring-addr", func(o *Options, a string) { o.MonitoringAddr = a }},
	})
}

// TestKubeStartup shares one API server between the checks of what a
// control plane with a Kubernetes source says as it starts.
func TestKubeStartup(t *testing.T) {
	env := kubetest.Start(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	writeKubeconfig(t, env.Config, kubeconfig)
	base := func(t *testing.T) Options {
		o := localOptions(t)
		o.Kubeconfig = kubeconfig
		o.LeaderElection.Enabled = false
		return o
	}
	// The listeners that only a Kubernetes source opens (the CA's TLS xDS
	// and the webhooks) name their flags too.
	t.Run("port conflicts", func(t *testing.T) {
		runPortConflicts(t, base, []portCase{
			{"--secure-xds-addr", func(o *Options, a string) { o.SecureXDSAddr = a }},
			{"--webhook-addr", func(o *Options, a string) { o.Webhook.Addr = a }},
			{"--xds-addr", func(o *Options, a string) { o.XDSAddr = a }},
		})
	})
	t.Run("injection template", func(t *testing.T) {
		testInjectionTemplateLog(t, base)
	})
}

// testInjectionTemplateLog: without --inject-config-dir the built-in
// template is the plan, so startup says so at info level and warns about
// nothing; a configured directory that is missing is worth a warning.
func testInjectionTemplateLog(t *testing.T, base func(*testing.T) Options) {
	cases := []struct {
		name      string
		dir       func(t *testing.T) string
		wantLevel slog.Level
		wantMsg   string
	}{
		{"not configured", func(*testing.T) string { return "" }, slog.LevelInfo, "sidecar injection uses the built-in template (no --inject-config-dir)"},
		{"configured but missing", func(t *testing.T) string { return filepath.Join(t.TempDir(), "absent") }, slog.LevelWarn, "injection config not readable; serving the built-in template"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recordHandler{}
			o := base(t)
			o.Logger = slog.New(rec)
			o.Webhook.InjectConfigDir = tc.dir(t)
			srv, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			srv.closeListeners()
			rec.mu.Lock()
			defer rec.mu.Unlock()
			var found bool
			for _, r := range rec.records {
				if strings.Contains(r.Message, "inject") {
					found = found || (r.Message == tc.wantMsg && r.Level == tc.wantLevel)
				}
				if r.Level >= slog.LevelWarn && tc.wantLevel < slog.LevelWarn {
					t.Errorf("startup logged %s %q with nothing wrong", r.Level, r.Message)
				}
			}
			if !found {
				t.Errorf("no %s line %q among %v", tc.wantLevel, tc.wantMsg, rec.records)
			}
		})
	}
}

// recordHandler keeps every record, from whichever goroutine logs it.
type recordHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r)
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

func runPortConflicts(t *testing.T, base func(*testing.T) Options, cases []portCase) {
	for _, tc := range cases {
		t.Run(tc.flag, func(t *testing.T) {
			taken, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer taken.Close()
			o := base(t)
			tc.set(&o, taken.Addr().String())
			srv, err := New(o)
			if err == nil {
				srv.closeListeners()
				t.Fatalf("New started with %s on a port in use", tc.flag)
			}
			want := "address already in use (set by " + tc.flag + ")"
			if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), taken.Addr().String()) {
				t.Errorf("error %q; want it to name the address %s and contain %q", err, taken.Addr(), want)
			}
		})
	}
}

// localOptions listens on loopback ports the kernel picks, so that only the
// port a case takes can collide.
func localOptions(t testing.TB) Options {
	o := DefaultOptions()
	o.XDSAddr, o.SecureXDSAddr = "127.0.0.1:0", "127.0.0.1:0"
	o.HTTPAddr, o.MonitoringAddr = "127.0.0.1:0", "127.0.0.1:0"
	o.Webhook.Addr = "127.0.0.1:0"
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return o
}

func writeKubeconfig(t testing.TB, cfg *rest.Config, path string) {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
}
