package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultAddr is where the webhooks listen unless told otherwise; the
// Service maps port 443 to it.
const DefaultAddr = ":15017"

const defaultShutdownTimeout = 5 * time.Second

// ServerOptions configure a Server.
type ServerOptions struct {
	// Addr is the TCP address to listen on; empty means DefaultAddr.
	// Port 0 picks a free port (see Server.Addr).
	Addr string
	// Handlers maps request paths (e.g. "/inject", "/validate") to their
	// handlers. Each path also serves its subtree ("/inject/..."), since
	// webhook configurations sometimes carry a trailing segment.
	Handlers map[string]http.Handler
	// Certs supplies the serving certificate at each handshake, so a
	// rotated certificate is used without a restart. The caller runs it.
	Certs CertificateSource
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics defaults to unregistered metrics.
	Metrics *Metrics
	// ShutdownTimeout bounds how long Run waits for in-flight requests
	// after its context ends; zero means 5s, and a negative value closes
	// them at once.
	ShutdownTimeout time.Duration
}

// CertificateSource gives the serving certificate for a handshake, as
// tls.Config.GetCertificate does; the mesh CA's rotating certificate is one.
type CertificateSource interface {
	GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error)
}

// Server serves the admission webhooks over TLS.
type Server struct {
	listener        net.Listener
	http            *http.Server
	log             *slog.Logger
	shutdownTimeout time.Duration
	started         atomic.Bool
}

// NewServer validates the options and binds the listening socket, so Addr
// is known (and the port taken) before Run is called.
func NewServer(opts ServerOptions) (*Server, error) {
	if opts.Certs == nil {
		return nil, errors.New("webhook server: Certs is required")
	}
	if len(opts.Handlers) == 0 {
		return nil, errors.New("webhook server: no handlers")
	}
	if opts.Addr == "" {
		opts.Addr = DefaultAddr
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	switch {
	case opts.ShutdownTimeout == 0:
		opts.ShutdownTimeout = defaultShutdownTimeout
	case opts.ShutdownTimeout < 0:
		opts.ShutdownTimeout = 0
	}
	mux, err := newMux(opts.Handlers, opts.Metrics)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("webhook server: listen on %s: %w", opts.Addr, err)
	}
	log := opts.Logger.With("component", "webhook-server")
	return &Server{
		listener: ln,
		http: &http.Server{
			Handler: mux,
			TLSConfig: &tls.Config{
				MinVersion:     tls.VersionTLS12,
				GetCertificate: opts.Certs.GetCertificate,
			},
			// The API server gives a webhook at most 30s; nothing useful
			// happens after that.
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       90 * time.Second,
			// Handshake failures land here; they are how a stale caBundle
			// shows itself, so keep them visible.
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelInfo),
		},
		log:             log,
		shutdownTimeout: opts.ShutdownTimeout,
	}, nil
}

// newMux registers every handler for its path and subtree, wrapped to count
// requests by path.
func newMux(handlers map[string]http.Handler, metrics *Metrics) (*http.ServeMux, error) {
	paths := make([]string, 0, len(handlers))
	for p := range handlers {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	mux := http.NewServeMux()
	seen := make(map[string]string, len(paths))
	for _, p := range paths {
		h := handlers[p]
		if h == nil {
			return nil, fmt.Errorf("webhook server: nil handler for %q", p)
		}
		if !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("webhook server: path %q must start with /", p)
		}
		base := strings.TrimSuffix(p, "/")
		if base == "" {
			return nil, errors.New("webhook server: the root path cannot be a webhook")
		}
		if other, dup := seen[base]; dup {
			return nil, fmt.Errorf("webhook server: paths %q and %q overlap", other, p)
		}
		seen[base] = p
		wrapped := instrument(base, h, metrics)
		mux.Handle(base, wrapped)
		mux.Handle(base+"/", wrapped)
	}
	return mux, nil
}

// Addr is the address the server listens on, with the real port.
func (s *Server) Addr() string { return s.listener.Addr().String() }

// Run serves until ctx ends, then stops accepting connections and waits up
// to the shutdown timeout for in-flight reviews. It returns nil after a
// clean shutdown. A Server runs once.
func (s *Server) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("webhook server: Run called twice")
	}
	s.log.Info("serving webhooks", "addr", s.Addr())
	served := make(chan error, 1)
	go func() { served <- s.http.ServeTLS(s.listener, "", "") }()
	select {
	case err := <-served:
		return fmt.Errorf("webhook server: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.shutdownTimeout)
	defer cancel()
	err := s.http.Shutdown(shutdownCtx)
	if err != nil {
		s.log.Warn("in-flight webhook requests cut short", "error", err)
		_ = s.http.Close()
	}
	if serveErr := <-served; !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("webhook server: %w", serveErr)
	}
	s.log.Info("webhook server stopped")
	return err
}

// statusRecorder remembers the status code a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func instrument(path string, h http.Handler, metrics *Metrics) http.Handler {
	duration := metrics.RequestDuration.WithLabelValues(path)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if rec.code == 0 {
			rec.code = http.StatusOK
		}
		duration.Observe(time.Since(start).Seconds())
		metrics.Requests.WithLabelValues(path, strconv.Itoa(rec.code)).Inc()
	})
}
