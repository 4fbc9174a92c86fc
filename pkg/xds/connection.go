package xds

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// connection is one ADS stream. Its goroutine alone handles requests and
// pushes and mutates the watches; mu lets the debug endpoints read them.
type connection struct {
	s     *Server
	delta bool
	log   *slog.Logger
	// ctx is the stream's: its peer and metadata prove who the client is.
	ctx context.Context

	id          string
	connectedAt time.Time
	proxy       *model.Proxy
	generators  map[string]Generator
	// istioClients is the pilot_xds gauge of the client's Istio version.
	istioClients prometheus.Gauge
	// pushed is set when a push sends a response, for convergence time.
	pushed bool

	// syncSlot is the connection's admission while it receives its initial
	// configuration (admission.go); nil before it asked for anything.
	syncSlot *syncSlot

	// queue holds the push plans the connection has not taken yet, merged.
	queue mailbox[*pushPlan]

	// identityKey is the proxy's identity for sharing generations, computed
	// for the served state identityOf (see identity).
	identityOf  *pushState
	identityKey string

	// pinned is the state the push in progress serves (see pin).
	pinned *pushState

	mu      sync.Mutex
	watches map[string]*watch
	order   []string // watched type URLs in push order

	// unservedLogged are the unserved type URLs already logged.
	unservedLogged map[string]struct{}

	// send hands a response to the sender goroutine; sendResult returns its error.
	sendCh     chan func() error
	sendResult chan error
	done       chan struct{}
}

// NackRecord is the last rejection of a type on a connection.
type NackRecord struct {
	Version string    `json:"version"`
	Nonce   string    `json:"nonce"`
	Error   string    `json:"error"`
	Time    time.Time `json:"time"`
}

// generated is one resource of a response, with its content hash.
type generated struct {
	name     string
	resource *anypb.Any
	hash     uint64
	version  string
	// aliases are subscribed names this resource answers (delta only).
	aliases []string
}

func (s *Server) newConnection(delta bool) *connection {
	return &connection{
		s:           s,
		delta:       delta,
		log:         s.log,
		connectedAt: time.Now(),
		queue:       newMailbox(s.mergePlans),
		watches:     map[string]*watch{},
		sendCh:      make(chan func() error),
		sendResult:  make(chan error, 1),
		done:        make(chan struct{}),
	}
}

func (c *connection) mode() string {
	if c.delta {
		return "delta"
	}
	return "sotw"
}

// initialize parses the node of the first request and registers the
// connection for pushes. Later requests may omit the node (gRFC A27).
func (c *connection) initialize(node *corev3.Node) error {
	if c.proxy != nil {
		return nil
	}
	proxy, err := parseNode(node)
	if err != nil {
		return status.Error(codes.InvalidArgument, clip(err.Error()))
	}
	if err := c.authenticate(proxy); err != nil {
		return err
	}
	c.proxy = proxy
	c.generators = c.s.opts.Generators(proxy)
	c.istioClients = c.s.metrics.istioClients(proxy.IstioVersion)
	c.id = proxy.ID + "-" + formatUint(c.s.connIDs.Add(1))
	c.log = c.s.log.With("proxy", proxy.ID, "conn", c.id, "mode", c.mode())
	c.s.addConnection(c)
	c.log.Info("xDS client connected", "namespace", proxy.Namespace, "generator", proxy.Generator)
	return nil
}

// authenticate sets the proxy's verified identity, if the stream proves
// one. A proxy may not claim a namespace other than the one it proved:
// the namespace decides which services, rules and Secrets it is served.
func (c *connection) authenticate(proxy *model.Proxy) error {
	if c.s.opts.Authenticate == nil {
		return nil
	}
	id, err := c.s.opts.Authenticate(c.ctx)
	if err != nil {
		c.s.metrics.streamErrors.WithLabelValues(reasonUnauthenticated).Inc()
		c.log.Warn("xDS client not authenticated; closing the stream", "node", proxy.ID, "err", err)
		if _, isStatus := status.FromError(err); isStatus {
			return err
		}
		return status.Error(codes.Unauthenticated, err.Error())
	}
	if id != nil && id.Namespace != proxy.Namespace {
		c.s.metrics.streamErrors.WithLabelValues(reasonUnauthenticated).Inc()
		c.log.Warn("xDS client claims another namespace than it proved; closing the stream",
			"node", proxy.ID, "identity", id.String(), "claimed", proxy.Namespace)
		return status.Errorf(codes.PermissionDenied, "node metadata claims namespace %q, but the client proved %s",
			proxy.Namespace, id)
	}
	proxy.VerifiedIdentity = id
	return nil
}

// served reports whether the proxy's generator set serves typeURL. A
// request without a type is malformed and ends the stream; a type the
// proxy is not served is not: Istio's agents ask for types such as NDS and
// ECDS, and would reconnect in a loop (see unservedType).
func (c *connection) served(typeURL string) (bool, error) {
	if typeURL == "" {
		return false, status.Error(codes.InvalidArgument, "request has no type_url")
	}
	return c.generators[typeURL] != nil, nil
}

// maxUnservedLogged bounds the unserved types logged per connection, so a
// client that makes up type URLs cannot flood the log.
const maxUnservedLogged = 8

// unservedType counts a request for a type the proxy is not served, and
// logs the first request of each such type. It reports whether to answer:
// a subscription (no nonce) gets an empty response, so that the client
// stops waiting; an ACK of that response needs nothing.
func (c *connection) unservedType(typeURL, nonce string) bool {
	c.s.metrics.unservedTypes.Inc()
	if _, seen := c.unservedLogged[typeURL]; !seen && len(c.unservedLogged) < maxUnservedLogged {
		if c.unservedLogged == nil {
			c.unservedLogged = map[string]struct{}{}
		}
		c.unservedLogged[typeURL] = struct{}{}
		c.log.Info("answering a type this proxy is not served with no resources", "type_url", typeURL)
	}
	return nonce == ""
}

// defaultMaxSubscribedNames bounds the resource names one stream may
// subscribe to, over all its types. A sidecar of a 5,000-service mesh subscribes to
// a load assignment per service port and subset, some 20,000 names, and to
// fewer routes; ten times that is no real client. Without a bound a delta
// client could grow its subscription, 4 MiB of names per request, until
// the server ran out of memory. SotW requests replace their type's list,
// and are held to the same total.
const defaultMaxSubscribedNames = 200_000

// checkSubscribed refuses, with an error that ends the stream, a
// subscription of w (nil for a new type) to n names that would take the
// stream's names over Options.MaxSubscribedNames.
func (c *connection) checkSubscribed(w *watch, n int) error {
	total := n
	for _, other := range c.watches {
		if other != w {
			total += len(other.resource.ResourceNames)
		}
	}
	if total <= c.s.opts.MaxSubscribedNames {
		return nil
	}
	return status.Errorf(codes.ResourceExhausted,
		"the stream would subscribe to %d resource names, more than the %d one stream may", total, c.s.opts.MaxSubscribedNames)
}

// addWatch starts tracking a type URL.
func (c *connection) addWatch(typeURL string) *watch {
	if typeURL == SecretType && c.proxy.VerifiedIdentity == nil {
		c.log.Warn("SDS asked on a stream that proved no identity: no Secret is served on it; " +
			"connect over TLS (15012) with a certificate from the mesh CA or a ServiceAccount token")
	}
	w := &watch{typeURL: typeURL, resource: model.WatchedResource{TypeURL: typeURL},
		metrics: c.s.metrics.forType(typeURL)}
	c.mu.Lock()
	c.watches[typeURL] = w
	c.order = append(c.order, typeURL)
	slices.SortFunc(c.order, func(a, b string) int {
		return cmp.Or(cmp.Compare(typeRank(a), typeRank(b)), cmp.Compare(a, b))
	})
	c.mu.Unlock()
	return w
}

func typeRank(typeURL string) int {
	if r, ok := pushOrder[typeURL]; ok {
		return r
	}
	return len(pushOrder)
}

// maxNackDetail bounds what is kept of a NACK's message. The client
// chooses it, up to the 4 MiB of a request, and it is held for as long as
// the stream lives, logged, and shown in every /debug/syncz and
// istioctl proxy-status answer: a few clients rejecting with megabytes each
// would make those answers, and the log, that large. The first 4 KiB name
// the offending resources and the reason.
const maxNackDetail = 4 << 10

// nackRedactWindow is how much of a NACK's message past the part kept is
// redacted with it: room for the rest of any key the cut could split (an
// 8192-bit RSA key's PEM is under 7 KB), so that a message of megabytes
// costs a scan of 68 KiB, not of all of it (0.4 s for 4 MiB here).
const nackRedactWindow = 64 << 10

// nackDetail is what is kept of a NACK's message. The message may quote
// the rejected config, private keys included, so it is redacted before it
// is clipped: a key cut short by clipping could escape the patterns that
// find it.
func nackDetail(detail string) string {
	total := len(detail)
	window := detail[:min(total, maxNackDetail+nackRedactWindow)]
	return clipReporting(redactText(window), maxNackDetail, total)
}

func (c *connection) recordNack(w *watch, version, nonce, detail string) {
	detail = nackDetail(detail)
	c.mu.Lock()
	w.nack = &NackRecord{Version: version, Nonce: nonce, Error: detail, Time: time.Now()}
	w.nackedHash = w.sentHash
	w.nackWithholds = true
	c.mu.Unlock()
	w.metrics.rejected()
	c.log.Warn("xDS client rejected a response", "type", shortType(w.typeURL), "nonce", nonce,
		"version", version, "error", detail)
}

func (c *connection) recordAck(w *watch, version, nonce string) {
	c.mu.Lock()
	w.ackedVersion = version
	w.ackedNonce = nonce
	w.nackWithholds = false
	c.mu.Unlock()
	c.log.Debug("xDS client acknowledged", "type", shortType(w.typeURL), "nonce", nonce, "version", version)
}

// generate returns w's resources for req, hashed, through the shared
// generations of st: a connection whose proxy is identical to one that
// already generated the same thing takes that result. planID names the push
// plan whose partial request req is (0 for complete generations).
func (c *connection) generate(w *watch, req *model.PushRequest, planID uint64, st *pushState) (*generation, error) {
	key, ok := c.shareKey(w, req, planID, st)
	if !ok {
		return c.generateOwn(w, req, st)
	}
	r, leader := st.shared.claim(key, w.resource.ResourceNames, w.nameList)
	switch {
	case r == nil:
		return c.generateOwn(w, req, st)
	case leader:
		// Should the generator never return, waiters must not mistake the
		// missing result for an empty one: an empty CDS deletes every cluster.
		gen, err := (*generation)(nil), errGenerationAbandoned
		defer func() { st.shared.finish(r, gen, err) }()
		gen, err = c.generateOwn(w, req, st)
		return gen, err
	}
	<-r.done
	if r.err != nil {
		c.log.Debug("shared generation failed; keeping the previous response", "type", shortType(w.typeURL), "err", r.err)
	}
	return r.gen, r.err
}

// generateOwn runs the type's generator for w and hashes the result.
// Resources outside an explicit subscription are dropped, since the client
// did not ask for them.
func (c *connection) generateOwn(w *watch, req *model.PushRequest, st *pushState) (*generation, error) {
	g := c.generators[w.typeURL]
	wr := w.resource
	c.s.generationSlots <- struct{}{}
	defer func() { <-c.s.generationSlots }()
	res, err := c.runGenerator(g, st, &wr, req)
	if err != nil {
		c.s.metrics.generateErrors.WithLabelValues(shortType(w.typeURL)).Inc()
		c.log.Error("generator failed; keeping the previous response", "type", shortType(w.typeURL), "err", err)
		return nil, err
	}
	out := make([]generated, 0, len(res))
	for _, r := range res {
		if r.Resource == nil {
			continue
		}
		if !w.resource.Wildcard && !subscribedTo(w.resource.ResourceNames, r) {
			continue
		}
		h := xxhash.Sum64(r.Resource.GetValue())
		out = append(out, generated{name: r.Name, resource: r.Resource, hash: h, version: hashString(h), aliases: r.Aliases})
	}
	return newGeneration(out), nil
}

// subscribedTo reports whether the sorted names include r's name or one of
// its aliases.
func subscribedTo(names []string, r model.Resource) bool {
	if _, found := slices.BinarySearch(names, r.Name); found {
		return true
	}
	for _, a := range r.Aliases {
		if _, found := slices.BinarySearch(names, a); found {
			return true
		}
	}
	return false
}

// runGenerator calls g and turns a panic into an error: a bug that one
// proxy's inputs trigger fails that proxy's push of that type alone, which
// keeps its previous response, instead of every stream in the process.
func (c *connection) runGenerator(g Generator, st *pushState, w *model.WatchedResource, req *model.PushRequest) (res model.Resources, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.s.metrics.generatorPanics.WithLabelValues(shortType(w.TypeURL)).Inc()
			c.log.Error("generator panicked", "type", shortType(w.TypeURL), "panic", r, "stack", string(debug.Stack()))
			res, err = nil, fmt.Errorf("generator for %s panicked: %v", shortType(w.TypeURL), r)
		}
	}()
	return g.Generate(c.proxy, st.push, w, req)
}

// responseHash identifies a response's content: names and bytes, in order.
func responseHash(items []generated, removed []string) uint64 {
	d := xxhash.New()
	var buf [8]byte
	for _, it := range items {
		_, _ = d.WriteString(it.name)
		for i := range buf {
			buf[i] = byte(it.hash >> (8 * i))
		}
		_, _ = d.Write(buf[:])
	}
	_, _ = d.WriteString("\x00removed")
	for _, name := range removed {
		_, _ = d.WriteString(name)
		_, _ = d.Write([]byte{0})
	}
	return d.Sum64()
}

func hashString(h uint64) string {
	const digits = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = digits[h&0xf]
		h >>= 4
	}
	return string(b[:])
}

// pin makes every response until the returned function is called come from
// the state served now, and returns that function. A push sends its types in
// order, clusters before the listeners and routes that name them (Envoy's
// make-before-break); were a newer state stored halfway, the routes of the
// newer state could name clusters the client has not been sent. The push
// that the newer state brings sends those, again in order.
func (c *connection) pin() (unpin func()) {
	c.pinned = c.s.current.Load()
	return func() { c.pinned = nil }
}

// state is the push state a response is generated from: the pinned one
// during a push, else the newest.
func (c *connection) state() *pushState {
	if st := c.pinned; st != nil {
		return st
	}
	return c.s.current.Load()
}
