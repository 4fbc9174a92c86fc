package bootstrap

import (
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// debugMux serves health, readiness, the xDS debug endpoints and, with
// EnableProfiling, pprof. Health and readiness are open, for the kubelet's
// probes; everything under /debug/ is behind debugAuth, as on the
// monitoring port: the Service leaves this port out, but every pod of the
// cluster can reach the pod's own address.
func (s *Server) debugMux(xdsDebug http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/ready", s.serveReady)
	mux.Handle("/debug/", s.debugAuth(xdsDebug))
	if !s.opts.EnableProfiling {
		// /debug/pprof/ falls to xdsDebug, which answers 404.
		return mux
	}
	for path, handler := range map[string]http.HandlerFunc{
		"/debug/pprof/":        pprof.Index,
		"/debug/pprof/cmdline": pprof.Cmdline,
		"/debug/pprof/profile": pprof.Profile,
		"/debug/pprof/symbol":  pprof.Symbol,
		"/debug/pprof/trace":   pprof.Trace,
	} {
		mux.Handle(path, s.debugAuth(handler))
	}
	return mux
}

// monitoringMux serves Prometheus metrics, readiness so that probes can use
// either port, and the xDS debug endpoints, as istiod serves them on its
// monitoring port too, behind the same guard (debugAuth): tools and
// port-forwards that reach only 15014 work. pprof stays on the debug port
// alone.
func (s *Server) monitoringMux(reg *prometheus.Registry, xdsDebug http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/ready", s.serveReady)
	mux.Handle("/debug/", s.debugAuth(xdsDebug))
	return mux
}

func (s *Server) serveReady(w http.ResponseWriter, _ *http.Request) {
	if reason := s.notReadyReason(); reason != "" {
		http.Error(w, reason, http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}
