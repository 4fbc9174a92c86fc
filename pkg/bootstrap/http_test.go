package bootstrap

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// TestPprofOnlyWithEnableProfiling: pprof exposes the command line and
// memory of the control plane, so the debug server serves it only when
// asked to, and the xDS debug endpoints either way.
func TestPprofOnlyWithEnableProfiling(t *testing.T) {
	xdsDebug := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/syncz" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("[]\n"))
	})
	cases := []struct {
		name      string
		profiling bool
		want      map[string]int
	}{
		{"default", DefaultOptions().EnableProfiling, map[string]int{
			"/debug/pprof/": http.StatusNotFound, "/debug/pprof/cmdline": http.StatusNotFound,
			"/debug/pprof/heap": http.StatusNotFound, "/debug/syncz": http.StatusOK,
		}},
		{"enabled", true, map[string]int{
			"/debug/pprof/": http.StatusOK, "/debug/pprof/cmdline": http.StatusOK,
			"/debug/pprof/heap": http.StatusOK, "/debug/syncz": http.StatusOK,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{opts: Options{EnableProfiling: tc.profiling}}
			srv := httptest.NewServer(s.debugMux(xdsDebug))
			defer srv.Close()
			for path, want := range tc.want {
				if got := get(t, srv.URL+path); got != want {
					t.Errorf("GET %s: %d, want %d", path, got, want)
				}
			}
		})
	}
}

// TestMonitoringPortServesDebug: as on istiod, the xDS debug endpoints are
// on the monitoring port beside the metrics, and pprof is not, even when
// profiling is enabled on the debug port.
func TestMonitoringPortServesDebug(t *testing.T) {
	xdsDebug := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/debug/syncz", "/debug/config_dump", "/debug/pushcontext":
			_, _ = w.Write([]byte("{}\n"))
		default:
			http.NotFound(w, r)
		}
	})
	s := &Server{opts: Options{EnableProfiling: true}, log: slog.New(slog.DiscardHandler)}
	s.shuttingDown.Store(true) // so /ready answers without a control plane behind it
	srv := httptest.NewServer(s.monitoringMux(prometheus.NewRegistry(), xdsDebug))
	defer srv.Close()
	for path, want := range map[string]int{
		"/metrics":           http.StatusOK,
		"/debug/syncz":       http.StatusOK,
		"/debug/config_dump": http.StatusOK,
		"/debug/pushcontext": http.StatusOK,
		"/debug/pprof/":      http.StatusNotFound,
		"/debug/pprof/heap":  http.StatusNotFound,
		"/ready":             http.StatusServiceUnavailable,
	} {
		if got := get(t, srv.URL+path); got != want {
			t.Errorf("GET %s: %d, want %d", path, got, want)
		}
	}
}

// TestMonitoringPortDebugNeedsLocalOrRootToken: the monitoring port is on
// the Service, so, as on istiod, its debug endpoints answer a request from
// this host, or one with a ServiceAccount token of the root namespace, and
// no one else; /metrics stays open to scrapers.
func TestMonitoringPortDebugNeedsLocalOrRootToken(t *testing.T) {
	xdsDebug := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("[]\n")) })
	rootSA := &model.Identity{TrustDomain: "cluster.local", Namespace: "istio-system", ServiceAccount: "default"}
	appSA := &model.Identity{TrustDomain: "cluster.local", Namespace: "shop", ServiceAccount: "default"}
	cases := []struct {
		name   string
		remote string
		path   string
		proves *model.Identity
		err    error
		want   int
	}{
		{"IPv4 loopback", "127.0.0.1:40000", "/debug/syncz", nil, errNoDebugCredential, http.StatusOK},
		{"IPv6 loopback", "[::1]:40000", "/debug/config_dump", nil, errNoDebugCredential, http.StatusOK},
		{"remote without a token", "10.1.2.3:40000", "/debug/syncz", nil, errNoDebugCredential, http.StatusUnauthorized},
		{"remote with a refused token", "10.1.2.3:40000", "/debug/syncz", nil, errors.New("token: expired"), http.StatusUnauthorized},
		{"remote with a root namespace token", "10.1.2.3:40000", "/debug/syncz", rootSA, nil, http.StatusOK},
		{"remote with an application's token", "10.1.2.3:40000", "/debug/config_dump", appSA, nil, http.StatusForbidden},
		{"remote scraper", "10.1.2.3:40000", "/metrics", nil, errNoDebugCredential, http.StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{opts: Options{RootNamespace: "istio-system"}, log: slog.New(slog.DiscardHandler),
				debugAuthenticate: func(*http.Request) (*model.Identity, error) { return tc.proves, tc.err }}
			req := httptest.NewRequest(http.MethodGet, tc.path, nil)
			req.RemoteAddr = tc.remote
			rec := httptest.NewRecorder()
			s.monitoringMux(prometheus.NewRegistry(), xdsDebug).ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Fatalf("GET %s from %s: %d (%s), want %d", tc.path, tc.remote, rec.Code, rec.Body, tc.want)
			}
		})
	}
}
