package bootstrap

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestOptionsValidation(t *testing.T) {
	cases := []struct {
		name    string
		mutate  func(*Options)
		wantErr string
	}{
		{"no source", func(o *Options) { o.ConfigDir = "" }, "no config source"},
		{"no xds address", func(o *Options) { o.XDSAddr = "" }, "--xds-addr"},
		{"empty domain", func(o *Options) { o.DomainSuffix = "" }, "--domain"},
		{"debounce above max", func(o *Options) { o.DebounceAfter, o.DebounceMax = time.Second, time.Millisecond }, "--debounce-after"},
		{"empty trust domain", func(o *Options) { o.TrustDomain = "" }, "--trust-domain"},
		{"node account without a namespace", func(o *Options) { o.CA.TrustedNodeAccounts = []string{"ztunnel"} }, "--trusted-node-accounts"},
		{"default cert TTL above the maximum", func(o *Options) { o.CA.WorkloadCertTTL = 91 * 24 * time.Hour }, "--workload-cert-ttl"},
		{"serving cert TTL too short", func(o *Options) { o.CA.ServingCertTTL = time.Second }, "--serving-cert-ttl"},
		{"valid", func(*Options) {}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			o.ConfigDir = t.TempDir()
			tc.mutate(&o)
			err := o.validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.wantErr)
			}
		})
	}
}

// TestRunServesThenShutsDownGracefully starts a control plane on a YAML
// directory, waits for /ready, checks health and metrics, then cancels it
// as SIGTERM would and expects a clean exit with every port closed.
func TestRunServesThenShutsDownGracefully(t *testing.T) {
	dir := t.TempDir()
	svc := "apiVersion: v1\nkind: Service\nmetadata: {name: echo, namespace: demo}\nspec:\n  ports: [{name: grpc, port: 7070}]\n"
	if err := os.WriteFile(filepath.Join(dir, "svc.yaml"), []byte(svc), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.ConfigDir = dir
	opts.XDSAddr, opts.HTTPAddr, opts.MonitoringAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	opts.Webhook.Addr = "127.0.0.1:0"
	opts.ShutdownGrace = 2 * time.Second
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()

	// Directory-only: no TokenReview, so no CA and no 15012, though the
	// default asks for it; and no webhooks, though asked for too: their
	// certificate comes from the mesh CA, and only an API server calls them.
	if opts.SecureXDSAddr == "" || srv.SecureXDSAddr() != nil {
		t.Errorf("secure xDS %v with --secure-xds-addr %q and no Kubernetes source; want none", srv.SecureXDSAddr(), opts.SecureXDSAddr)
	}
	if got := srv.WebhookAddr(); got != "" {
		t.Errorf("webhooks served on %s with no Kubernetes source; want none", got)
	}

	httpURL := "http://" + srv.HTTPAddr().String()
	metricsURL := "http://" + srv.MonitoringAddr().String()
	deadline := time.Now().Add(30 * time.Second)
	for get(t, httpURL+"/ready") != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("never became ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, url := range []string{httpURL + "/healthz", metricsURL + "/metrics", metricsURL + "/ready", httpURL + "/debug/pushcontext"} {
		if code := get(t, url); code != http.StatusOK {
			t.Errorf("GET %s: %d", url, code)
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v after cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within the shutdown grace")
	}
	for _, addr := range []net.Addr{srv.XDSAddr(), srv.HTTPAddr(), srv.MonitoringAddr()} {
		if conn, err := net.DialTimeout("tcp", addr.String(), time.Second); err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections after shutdown", addr)
		}
	}
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
