package xds

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// Options configure a Server. Zero durations take the defaults below.
type Options struct {
	Store       model.Store
	PushContext pushcontext.Options
	// Generators chooses the generator set of a proxy, keyed by type URL. A
	// type URL without a generator is refused. Proxies with the same identity
	// (kind, namespace, locality, the services their workload serves, and
	// their labels where workload-selector rules exist) and subscription
	// share one generation per served version when their generator for the
	// type is the same comparable value: return the same generator instances
	// (pointers) for every proxy of a kind. Func generators are never shared.
	Generators func(*model.Proxy) map[string]Generator
	// DebounceAfter is the quiet period after a change before a push starts
	// (default 100ms); DebounceMax bounds how long continuous changes can
	// delay a push (default 10s).
	DebounceAfter time.Duration
	DebounceMax   time.Duration
	// SendTimeout bounds one send on a stream (default 10s); a client that
	// does not read for that long loses its stream and reconnects.
	SendTimeout time.Duration
	// MaxSubscribedNames bounds the resource names one stream may
	// subscribe to, over all its types (default 200,000; see
	// checkSubscribed).
	MaxSubscribedNames int
	// MaxConcurrentGenerations bounds how many connections generate at once
	// (default 100), so that a full push to thousands of connections does
	// not hold thousands of half-built responses in memory. Sends are not
	// bounded: a slow client must not hold a slot.
	MaxConcurrentGenerations int
	// MaxConcurrentSyncs bounds how many streams are sent their initial
	// configuration at once, the longest-connected first (admission.go);
	// default twice GOMAXPROCS.
	MaxConcurrentSyncs int
	// Authenticate, when set, proves who the client of a stream is, from
	// the stream's context (its TLS peer, its metadata). It returns a nil
	// identity for a stream that carries no proof and needs none (the
	// plaintext port), and an error, which ends the stream, for one whose
	// proof fails or is missing where one is required. A proven identity
	// must agree with the namespace the node claims.
	Authenticate func(context.Context) (*model.Identity, error)
	// OnBuild, when set, is called on the push loop after each push context
	// build, before connections are pushed; it must not block.
	OnBuild func(*pushcontext.PushContext)
	Logger  *slog.Logger
	Metrics *Metrics
}

const (
	defaultDebounceAfter = 100 * time.Millisecond
	defaultDebounceMax   = 10 * time.Second
	defaultSendTimeout   = 10 * time.Second
	defaultGenerations   = 100
)

// Server is the ADS server. It implements go-control-plane's
// AggregatedDiscoveryServiceServer.
type Server struct {
	opts    Options
	log     *slog.Logger
	metrics *Metrics

	// current is the push context that connections generate from, with the
	// version_info that responses carry.
	current atomic.Pointer[pushState]
	// nameLists shares identical SotW subscriptions between streams.
	nameLists nameLists
	ready     chan struct{}
	stop      chan struct{}
	stopped   sync.Once

	// pcOpts are the options push contexts are built with; the mesh config
	// may change them while serving (SetPushContextOptions).
	pcOpts atomic.Pointer[pushcontext.Options]

	// updates collects ConfigUpdate requests until the push loop takes them.
	updates pushQueue
	// building is set as Start begins the first build (see ConfigChanged).
	building atomic.Bool

	connsMu sync.RWMutex
	conns   map[*connection]struct{}

	// generationSlots holds one token per generation in progress.
	generationSlots chan struct{}
	// syncs admits streams to their initial configuration.
	syncs *syncAdmission

	nonces  atomic.Uint64
	connIDs atomic.Uint64
	planIDs atomic.Uint64
}

// pushState is one generation of what the server serves from.
type pushState struct {
	push *pushcontext.PushContext
	// version is the push context's version, suffixed with a counter after
	// each incremental endpoint update so that every EDS push differs.
	version    string
	edsUpdates uint64
	// shared holds what identical proxies share of this version's
	// generations; it is dropped with the version, as is routeRefs.
	shared    *sharedGenerations
	routeRefs routeRefs
	// bodies shares marshalled SotW responses among the streams that send
	// the same resources (codec.go).
	bodies responseBodies
}

func newPushState(push *pushcontext.PushContext, version string, edsUpdates uint64) *pushState {
	return &pushState{push: push, version: version, edsUpdates: edsUpdates, shared: newSharedGenerations()}
}

var _ discoveryv3.AggregatedDiscoveryServiceServer = (*Server)(nil)

// NewServer returns a server; Start must run before streams are served.
func NewServer(opts Options) *Server {
	if opts.DebounceAfter <= 0 {
		opts.DebounceAfter = defaultDebounceAfter
	}
	if opts.DebounceMax <= 0 {
		opts.DebounceMax = defaultDebounceMax
	}
	if opts.DebounceMax < opts.DebounceAfter {
		opts.DebounceMax = opts.DebounceAfter
	}
	if opts.SendTimeout <= 0 {
		opts.SendTimeout = defaultSendTimeout
	}
	if opts.MaxSubscribedNames <= 0 {
		opts.MaxSubscribedNames = defaultMaxSubscribedNames
	}
	if opts.MaxConcurrentGenerations <= 0 {
		opts.MaxConcurrentGenerations = defaultGenerations
	}
	if opts.MaxConcurrentSyncs <= 0 {
		opts.MaxConcurrentSyncs = 2 * runtime.GOMAXPROCS(0)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.Generators == nil {
		opts.Generators = func(*model.Proxy) map[string]Generator { return nil }
	}
	s := &Server{
		opts:    opts,
		log:     opts.Logger.With("component", "xds"),
		metrics: opts.Metrics,
		ready:   make(chan struct{}),
		stop:    make(chan struct{}),
		updates: newPushQueue(),
		conns:   map[*connection]struct{}{},

		generationSlots: make(chan struct{}, opts.MaxConcurrentGenerations),
		syncs:           newSyncAdmission(opts.MaxConcurrentSyncs),
	}
	s.pcOpts.Store(&opts.PushContext)
	opts.Metrics.observe(s)
	return s
}

// SetPushContextOptions makes the next push contexts use o, as when the mesh
// config changes the root namespace or the Ingress settings, and asks for a
// full push: a push context built with other options shares nothing with
// the previous one.
func (s *Server) SetPushContextOptions(o pushcontext.Options) {
	s.pcOpts.Store(&o)
	s.ConfigUpdate(&model.PushRequest{Full: true, Start: time.Now()})
}

// Register serves both ADS variants on g.
func (s *Server) Register(g *grpc.Server) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, s)
}

// Ready reports whether the first push context has been built.
func (s *Server) Ready() bool { return s.current.Load() != nil }

// Started is closed once the first push context has been built.
func (s *Server) Started() <-chan struct{} { return s.ready }

// PushContext returns the push context being served, nil before Start.
func (s *Server) PushContext() *pushcontext.PushContext {
	if st := s.current.Load(); st != nil {
		return st.push
	}
	return nil
}

// ConfigUpdate asks for a push. It never blocks: requests are merged until the
// push loop, after debouncing, takes them. It takes ownership of req: the
// caller must not use req again, as later requests are folded into it.
func (s *Server) ConfigUpdate(req *model.PushRequest) {
	if req == nil {
		return
	}
	if req.Start.IsZero() {
		// A zero start would win every merge and hide convergence time.
		stamped := *req
		stamped.Start = time.Now()
		req = &stamped
	}
	s.metrics.configUpdate(req)
	s.updates.put(req)
}

// ConfigChanged asks for a push for one object, which the caller has
// already changed in the store the push contexts are built from; it is the
// store's change callback. Before Start begins the first build, which reads
// the whole store and so holds every change made until then, it does
// nothing: a source's initial list (10,000 objects at 5,000 Services) would
// otherwise make as many requests, merged only for Start to drop them. A
// change the first build may have missed is one whose store write comes
// after the build's read, and so after building was set: it is queued.
// An Ingress status change is not: only the status writer reads it.
func (s *Server) ConfigChanged(key model.ConfigKey) {
	if !s.building.Load() || key.Kind == model.KindIngressStatus {
		return
	}
	s.ConfigUpdate(model.NewPushRequest(key, time.Now()))
}

// Start builds the first push context, which releases waiting streams, then
// runs the debounce and push loop until ctx is done or Stop is called. Call
// it once.
func (s *Server) Start(ctx context.Context) {
	// The first build reads the whole store, so changes queued before it are
	// already included.
	s.building.Store(true)
	s.updates.take()
	s.build(&model.PushRequest{Full: true, Start: time.Now()})
	close(s.ready)
	s.log.Info("first push context built", "version", s.current.Load().version)
	s.pushLoop(ctx)
}

// Stop ends every stream cleanly (the client sees the stream finish and
// reconnects elsewhere). The caller then stops the gRPC server.
func (s *Server) Stop() {
	s.stopped.Do(func() { close(s.stop) })
}

func (s *Server) nextNonce() string {
	return formatUint(s.nonces.Add(1))
}

func (s *Server) addConnection(c *connection) {
	s.connsMu.Lock()
	s.conns[c] = struct{}{}
	s.connsMu.Unlock()
	s.metrics.clients.WithLabelValues(c.mode()).Inc()
	c.istioClients.Inc()
}

func (s *Server) removeConnection(c *connection) {
	s.connsMu.Lock()
	_, ok := s.conns[c]
	delete(s.conns, c)
	s.connsMu.Unlock()
	if ok {
		s.metrics.clients.WithLabelValues(c.mode()).Dec()
		c.istioClients.Dec()
	}
}

func (s *Server) connections() []*connection {
	s.connsMu.RLock()
	defer s.connsMu.RUnlock()
	out := make([]*connection, 0, len(s.conns))
	for c := range s.conns {
		out = append(out, c)
	}
	return out
}

// waitReady blocks until the first push context exists, the stream ends or
// the server stops; it reports whether serving can go on.
func (s *Server) waitReady(ctx context.Context) bool {
	// Once ready, a stream that has already ended (say, gRPC refused a
	// request that does not unmarshal) still goes on to see its error, and
	// count it: select would pick between ready and done at random.
	select {
	case <-s.ready:
		return true
	default:
	}
	select {
	case <-s.ready:
		return true
	case <-ctx.Done():
	case <-s.stop:
	}
	return false
}
