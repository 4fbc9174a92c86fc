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

// TestDebugNeedsLocalOrRootToken: the debug endpoints of both ports answer
// a request from this host, or one with a ServiceAccount token of the root
// namespace, and no one else, as istiod's monitoring port does. The debug
// port is not on the Service, but any pod can dial the pod's address.
// Probes and scrapers come from elsewhere, and stay open.
func TestDebugNeedsLocalOrRootToken(t *testing.T) {
	xdsDebug := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("[]\n")) })
	rootSA := &model.Identity{TrustDomain: "cluster.local", Namespace: "istio-system", ServiceAccount: "default"}
	appSA := &model.Identity{TrustDomain: "cluster.local", Namespace: "shop", ServiceAccount: "default"}
	ports := map[string]func(*Server) http.Handler{
		"monitoring": func(s *Server) http.Handler { return s.monitoringMux(prometheus.NewRegistry(), xdsDebug) },
		"debug":      func(s *Server) http.Handler { return s.debugMux(xdsDebug) },
	}
	cases := []struct {
		name   string
		port   string
		remote string
		path   string
		proves *model.Identity
		err    error
		want   int
	}{
		{"IPv4 loopback", "monitoring", "127.0.0.1:40000", "/debug/syncz", nil, errNoDebugCredential, http.StatusOK},
		{"IPv6 loopback", "monitoring", "[::1]:40000", "/debug/config_dump", nil, errNoDebugCredential, http.StatusOK},
		{"remote without a token", "monitoring", "10.1.2.3:40000", "/debug/syncz", nil, errNoDebugCredential, http.StatusUnauthorized},
		{"remote with a refused token", "monitoring", "10.1.2.3:40000", "/debug/syncz", nil, errors.New("token: expired"), http.StatusUnauthorized},
		{"remote with a root namespace token", "monitoring", "10.1.2.3:40000", "/debug/syncz", rootSA, nil, http.StatusOK},
		{"remote with an application's token", "monitoring", "10.1.2.3:40000", "/debug/config_dump", appSA, nil, http.StatusForbidden},
		{"remote scraper", "monitoring", "10.1.2.3:40000", "/metrics", nil, errNoDebugCredential, http.StatusOK},
		{"IPv4 loopback", "debug", "127.0.0.1:40000", "/debug/config_dump", nil, errNoDebugCredential, http.StatusOK},
		{"remote without a token", "debug", "10.1.2.3:40000", "/debug/config_dump", nil, errNoDebugCredential, http.StatusUnauthorized},
		{"remote pprof without a token", "debug", "10.1.2.3:40000", "/debug/pprof/cmdline", nil, errNoDebugCredential, http.StatusUnauthorized},
		{"remote pprof with a root namespace token", "debug", "10.1.2.3:40000", "/debug/pprof/cmdline", rootSA, nil, http.StatusOK},
		{"remote with an application's token", "debug", "10.1.2.3:40000", "/debug/syncz", appSA, nil, http.StatusForbidden},
		{"kubelet's liveness probe", "debug", "10.1.0.1:40000", "/healthz", nil, errNoDebugCredential, http.StatusOK},
		{"kubelet's readiness probe", "debug", "10.1.0.1:40000", "/ready", nil, errNoDebugCredential, http.StatusServiceUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.port+"/"+tc.name, func(t *testing.T) {
			s := &Server{opts: Options{RootNamespace: "istio-system", EnableProfiling: true}, log: slog.New(slog.DiscardHandler),
				debugAuthenticate: func(*http.Request) (*model.Identity, error) { return tc.proves, tc.err }}
			s.shuttingDown.Store(true) // so /ready answers without a control plane behind it
			req := httptest.NewRequest(http.MethodGet, tc.path, nil)
			req.RemoteAddr = tc.remote
			rec := httptest.NewRecorder()
			ports[tc.port](s).ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Fatalf("GET %s from %s: %d (%s), want %d", tc.path, tc.remote, rec.Code, rec.Body, tc.want)
			}
		})
	}
}
