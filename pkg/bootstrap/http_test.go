package bootstrap

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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
	s := &Server{opts: Options{EnableProfiling: true}}
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
