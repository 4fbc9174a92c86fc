package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/internal/exepages"
	"github.com/meshpilot/meshpilot/internal/version"
	"github.com/meshpilot/meshpilot/pkg/controllers"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/xds"
)

// Server is an assembled control plane. New opens its listeners, so their
// addresses are known (and ":0" works) before Run serves them.
type Server struct {
	opts     Options
	log      *slog.Logger
	registry *prometheus.Registry
	store    model.Store
	sources  []source
	// kube and kubeSynced are set when the Kubernetes source runs; Ingress
	// status and events are written back only then.
	kube       kubernetes.Interface
	kubeSynced <-chan struct{}
	writeBack  *ingressWriteBack
	ca         *meshCA
	webhooks   *webhooks
	secure     *secureXDS
	xds        *xds.Server
	grpc       *grpc.Server
	// debugID names this control plane in the answers to Istio's debug
	// types, on both xDS servers.
	debugID grpc.StreamServerInterceptor
	// debugAuthenticate, when set, replaces the token check of debugAuth
	// (tests).
	debugAuthenticate func(*http.Request) (*model.Identity, error)

	xdsListener  net.Listener
	httpServers  []*http.Server
	httpListener []net.Listener

	shuttingDown atomic.Bool
}

// New builds a control plane from opts without starting anything.
func New(opts Options) (*Server, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	s := &Server{opts: opts, log: opts.Logger, registry: prometheus.NewRegistry()}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	s.store = model.NewStore()
	sources, err := s.newSources(s.store, controllers.NewMetrics(s.registry))
	if err != nil {
		return nil, err
	}
	s.sources = sources

	if s.writeBack, err = s.newIngressWriteBack(); err != nil {
		return nil, err
	}
	s.ca = s.newMeshCA()
	if opts.Webhook.Addr != "" {
		if s.webhooks, err = s.newWebhooks(); err != nil {
			return nil, err
		}
	}

	generators := newGeneratorSets(s.log, opts.DomainSuffix)
	s.xds = xds.NewServer(xds.Options{
		Store:              s.store,
		PushContext:        pushContextOptions(&opts),
		Authenticate:       s.authenticateXDS,
		OnBuild:            s.onBuild,
		Generators:         generators.forProxy,
		DebounceAfter:      opts.DebounceAfter,
		DebounceMax:        opts.DebounceMax,
		SendTimeout:        opts.SendTimeout,
		MaxConcurrentSyncs: opts.MaxConcurrentSyncs,
		Logger:             s.log,
		Metrics:            xds.NewMetrics(s.registry),
	})
	s.store.OnChange(s.xds.ConfigChanged)

	// istioctl proxy-status asks for Istio's debug types on both xDS ports.
	generators.addDebug(s.xds.SyncGenerator(opts.RootNamespace))
	s.debugID = xds.DebugIdentityInterceptor(xds.ControlPlaneID{
		// istioctl names the control plane by this ID (the pod name); the
		// component is istiod's, whose place meshpilot takes.
		Component: "istiod",
		ID:        opts.LeaderElection.Identity,
		Info:      xds.ControlPlaneInfo{Version: version.String(), GolangVersion: runtime.Version(), BuildStatus: "Clean"},
	})
	s.grpc = newXDSGRPCServer(opts.MaxConnectionAge, opts.MaxConnectionAgeGrace, grpc.StreamInterceptor(s.debugID))
	s.xds.Register(s.grpc)
	if s.secure, err = s.newSecureXDS(); err != nil {
		return nil, err
	}

	if err := s.listen(); err != nil {
		s.closeListeners()
		return nil, err
	}
	return s, nil
}

func (s *Server) listen() error {
	l, err := listenXDS(s.opts.XDSAddr, flagXDSAddr)
	if err != nil {
		return fmt.Errorf("xds listener: %w", err)
	}
	s.xdsListener = l
	for _, h := range []struct {
		addr    string
		flag    string
		handler http.Handler
	}{
		{s.opts.HTTPAddr, flagHTTPAddr, s.debugMux(s.xds.DebugHandler())},
		{s.opts.MonitoringAddr, flagMonitoringAddr, s.monitoringMux(s.registry, s.xds.DebugHandler())},
	} {
		if h.addr == "" {
			continue
		}
		l, err := listen(h.addr, h.flag)
		if err != nil {
			return fmt.Errorf("http listener: %w", err)
		}
		s.httpListener = append(s.httpListener, l)
		s.httpServers = append(s.httpServers, &http.Server{
			Handler:           h.handler,
			ReadHeaderTimeout: 10 * time.Second,
			// No WriteTimeout: a CPU profile or a trace streams for as
			// long as it was asked to. Idle keep-alive connections of
			// scrapers and probes are closed, so they cannot pile up.
			IdleTimeout: 90 * time.Second,
		})
	}
	return nil
}

func (s *Server) closeListeners() {
	if s.secure != nil {
		_ = s.secure.listener.Close()
	}
	if s.xdsListener != nil {
		_ = s.xdsListener.Close()
	}
	for _, l := range s.httpListener {
		_ = l.Close()
	}
}

// XDSAddr is the address the xDS server listens on.
func (s *Server) XDSAddr() net.Addr { return s.xdsListener.Addr() }

// SecureXDSAddr is the TLS xDS and CA listener's address, nil when
// disabled (always without a Kubernetes source).
func (s *Server) SecureXDSAddr() net.Addr {
	if s.secure == nil {
		return nil
	}
	return s.secure.listener.Addr()
}

// HTTPAddr is the debug server's address, nil when disabled.
func (s *Server) HTTPAddr() net.Addr { return s.listenerAddr(s.opts.HTTPAddr, 0) }

// MonitoringAddr is the metrics server's address, nil when disabled.
func (s *Server) MonitoringAddr() net.Addr {
	i := 0
	if s.opts.HTTPAddr != "" {
		i = 1
	}
	return s.listenerAddr(s.opts.MonitoringAddr, i)
}

func (s *Server) listenerAddr(configured string, i int) net.Addr {
	if configured == "" || i >= len(s.httpListener) {
		return nil
	}
	return s.httpListener[i].Addr()
}

// WebhookAddr is the admission webhooks' host:port, "" when disabled.
func (s *Server) WebhookAddr() string {
	if s.webhooks == nil {
		return ""
	}
	return s.webhooks.server.Addr()
}

// Registry holds every metric the control plane exports.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// Run serves until ctx is cancelled, then shuts down gracefully. HTTP and
// xDS serve at once; xDS clients wait for the first push context, which is
// built once every source has synced.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(s.sources)+len(s.httpServers)+4)

	for i, srv := range s.httpServers {
		wg.Go(func() {
			if err := srv.Serve(s.httpListener[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("http %s: %w", s.httpListener[i].Addr(), err)
			}
		})
	}
	for _, src := range s.sources {
		wg.Go(func() {
			if err := src.Run(ctx); err != nil && ctx.Err() == nil {
				errs <- err // "file source: ...": sources name themselves
			}
		})
	}
	wg.Go(func() {
		if err := s.grpc.Serve(s.xdsListener); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errs <- fmt.Errorf("xds: %w", err)
		}
	})
	if s.ca != nil {
		wg.Go(func() {
			if err := s.ca.run(ctx); err != nil && ctx.Err() == nil {
				errs <- err
			}
		})
	}
	if s.secure != nil {
		wg.Go(func() {
			if err := s.secure.run(ctx); err != nil && ctx.Err() == nil {
				errs <- err
			}
		})
	}
	wg.Go(func() { s.writeBack.run(ctx) })
	if s.opts.ReleaseStartupPages {
		wg.Go(func() { exepages.ReleaseWhen(ctx, s.xds.Started(), s.log) })
	}
	if s.opts.meshConfig != nil {
		wg.Go(func() { s.watchMeshConfig(ctx) })
	}
	// The webhooks stop with the start of shutdown, not after it: their
	// server drains in-flight reviews once its context ends, and it must
	// do so within the same grace period as the streams, not after it.
	webhookCtx, stopWebhooks := context.WithCancel(ctx)
	defer stopWebhooks()
	if s.webhooks != nil {
		wg.Go(func() {
			if err := s.webhooks.run(webhookCtx); err != nil && webhookCtx.Err() == nil {
				errs <- fmt.Errorf("webhooks: %w", err)
			}
		})
	}
	wg.Go(func() {
		if !s.waitForSources(ctx) {
			return
		}
		s.log.Info("all config sources synced; building the first push context")
		s.xds.Start(ctx)
	})
	s.log.Info("meshpilot serving", "xds", s.XDSAddr().String(), "secureXDS", addrString(s.SecureXDSAddr()), "http", addrString(s.HTTPAddr()),
		"monitoring", addrString(s.MonitoringAddr()), "webhooks", s.WebhookAddr())

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errs:
		s.log.Error("component failed; shutting down", "err", runErr)
	}
	s.shutdown(stopWebhooks)
	cancel()
	wg.Wait()
	return runErr
}

func (s *Server) waitForSources(ctx context.Context) bool {
	for _, src := range s.sources {
		select {
		case <-src.Synced():
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// sourcesSynced names the sources that have not synced yet, with the
// reason when a source knows it (a denied list, say).
func (s *Server) sourcesSynced() string {
	var pending []string
	for _, src := range s.sources {
		if src.HasSynced() {
			continue
		}
		name := src.Name()
		if p, ok := src.(interface{ SyncProblem() string }); ok {
			if problem := p.SyncProblem(); problem != "" {
				name += " (" + problem + ")"
			}
		}
		pending = append(pending, name)
	}
	return strings.Join(pending, ", ")
}

func (s *Server) notReadyReason() string {
	switch {
	case s.shuttingDown.Load():
		return "shutting down"
	case s.sourcesSynced() != "":
		return "waiting for config sources to sync: " + s.sourcesSynced()
	case !s.xds.Ready():
		return "waiting for the first push context"
	case s.ca != nil && !s.ca.hasRoot():
		// 15012 and the webhooks cannot complete a handshake without it.
		return "waiting for the CA root"
	}
	return ""
}

// shutdown stops taking new work, lets streams and requests drain for at
// most ShutdownGrace, then closes what is left. stopWebhooks starts the
// webhook server's own drain, bounded by the same grace (newWebhooks).
func (s *Server) shutdown(stopWebhooks context.CancelFunc) {
	s.shuttingDown.Store(true)
	s.log.Info("shutting down", "grace", s.opts.ShutdownGrace)
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownGrace)
	defer cancel()
	stopWebhooks()

	s.xds.Stop()
	servers := []*grpc.Server{s.grpc}
	if s.secure != nil {
		servers = append(servers, s.secure.grpc)
		// GracefulStop closes only listeners it serves; the CA may not
		// have been loaded yet, so close this one in any case.
		defer s.secure.listener.Close()
	}
	// Both drain at once, within the one grace period.
	var drained sync.WaitGroup
	for _, g := range servers {
		drained.Go(func() {
			stopped := make(chan struct{})
			go func() {
				g.GracefulStop()
				close(stopped)
			}()
			select {
			case <-stopped:
			case <-ctx.Done():
				g.Stop()
			}
		})
	}
	drained.Wait()
	for _, srv := range s.httpServers {
		if err := srv.Shutdown(ctx); err != nil {
			// Shutdown gives up at the deadline but leaves the requests
			// still running, and their connections, open: a debug client
			// that never finishes its request would keep both past Run.
			s.log.Warn("debug and monitoring requests cut short", "err", err)
			_ = srv.Close()
		}
	}
}

func addrString(a net.Addr) string {
	if a == nil {
		return "disabled"
	}
	return a.String()
}

// keepaliveTimeout is how long a keepalive ping, or data sent, may go
// unacknowledged before an xDS connection is closed.
const keepaliveTimeout = 10 * time.Second

// newXDSGRPCServer is a gRPC server for xDS streams: many long-lived streams
// per connection, requests of a few MiB at most, and keepalives that notice
// a vanished proxy within a minute without letting clients ping too often.
// Connections older than maxAge are sent a GOAWAY, and their streams closed
// grace later: the clients reconnect, through the Service, to any replica,
// so that after a rollout or a scale-up the load spreads out again instead
// of staying on the replicas that were up first.
func newXDSGRPCServer(maxAge, grace time.Duration, opts ...grpc.ServerOption) *grpc.Server {
	params := keepalive.ServerParameters{Time: 30 * time.Second, Timeout: keepaliveTimeout}
	if maxAge > 0 {
		params.MaxConnectionAge, params.MaxConnectionAgeGrace = maxAge, grace
	}
	return grpc.NewServer(append(append([]grpc.ServerOption{
		grpc.MaxConcurrentStreams(100_000),
		grpc.MaxRecvMsgSize(4 << 20),
		// A state-of-the-world CDS response is megabytes, sent again in
		// full to every sidecar after any cluster changes, and every
		// connection that is writing holds a buffer (by gRPC's default it
		// gives it back when it has flushed, so idle proxies hold none).
		// 64 KiB is the memory side of a trade: against 256 KiB, twelve
		// paired runs of the standard scenario peaked 13 MiB lower under
		// config churn, at a sixth more CPU per config change with 50
		// sidecars, which shrank to a few percent with 200; the connect
		// storm's CPU did not move beyond the noise. gRPC's 32 KiB made
		// write(2) a quarter of the CPU under config churn.
		grpc.WriteBufferSize(64 << 10),
		// Fixed flow-control windows for what clients send. A sidecar's
		// EDS request and every ACK of it list all its clusters (225 KB
		// at 5,000 Services), which gRPC's default 64 KiB window, grown
		// by bandwidth-delay pings, lets through in four or more rounds
		// of WINDOW_UPDATEs and wakeups. 1 MiB lets such a request
		// through at once: a twelfth less CPU in a connect storm, for a
		// few MiB more at the peak of a push, whose ACKs now arrive all
		// at once (docs/performance.md, "Fixed receive windows"). It
		// also bounds what a stream can make the server hold unread to
		// 1 MiB, where the probing grows windows up to 16 MiB.
		grpc.InitialWindowSize(1 << 20),
		grpc.InitialConnWindowSize(1 << 20),
		grpc.KeepaliveParams(params),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 15 * time.Second, PermitWithoutStream: true}),
	}, xds.ServerOptions()...), opts...)...)
}
