package xds

import (
	"slices"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// StreamAggregatedResources serves a state-of-the-world ADS stream.
func (s *Server) StreamAggregatedResources(stream grpc.BidiStreamingServer[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]) error {
	c := s.newConnection(false)
	sotw := &sotwStream{connection: c, stream: stream}
	return serveStream(stream.Context(), c, stream.Recv, sotw.handle, sotw.push)
}

type sotwStream struct {
	*connection
	stream grpc.BidiStreamingServer[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]
}

// handle processes one request: a new subscription, an ACK (possibly with
// changed names), a NACK, or a stale request to ignore.
func (c *sotwStream) handle(req *discoveryv3.DiscoveryRequest) error {
	if err := c.initialize(req.GetNode()); err != nil {
		return err
	}
	typeURL := req.GetTypeUrl()
	if deltaOnlyType(typeURL) {
		return status.Errorf(codes.InvalidArgument, "%s is served over delta ADS only (DeltaAggregatedResources)", typeURL)
	}
	if ok, err := c.served(typeURL); err != nil || !ok {
		if err == nil && c.unservedType(typeURL, req.GetResponseNonce()) {
			resp := &discoveryv3.DiscoveryResponse{VersionInfo: c.s.current.Load().version, TypeUrl: typeURL, Nonce: c.s.nextNonce()}
			return c.send(func() error { return c.stream.Send(resp) })
		}
		return err
	}
	w := c.watches[typeURL]
	nonce := req.GetResponseNonce()
	names, sent := w.namesOf(req.GetResourceNames())
	names, star := splitWildcard(names)
	if err := c.checkSubscribed(w, len(names)); err != nil {
		return err
	}

	if nonce == "" || w == nil {
		// A new subscription, or the client starting over for this type (a
		// client that reconnects may still carry a nonce of the previous
		// stream): always answered.
		if w == nil {
			w = c.addWatch(typeURL)
		}
		c.setNames(w, names, w.sotwRequest(names, star), sent)
		w.subscribedBy(sent)
		if !c.admitSync() {
			return nil
		}
		return c.respondAndWarm(w)
	}
	if nonce != w.sentNonce {
		// The request crossed a response, which the client answers next
		// with its whole subscription: it is not answered, and names it
		// adds wait for that. Names it only drops are dropped now: Envoy,
		// once it watches nothing of a type, takes an empty response of it
		// in silence (GrpcMuxImpl::onDiscoveryResponse, grpc_mux_impl.cc),
		// so no later request would say so, and the server would go on
		// pushing, and awaiting the ACK of, what no one watches.
		if !star && !w.resource.Wildcard && len(names) < len(w.resource.ResourceNames) &&
			len(sortedDifference(names, w.resource.ResourceNames)) == 0 {
			c.setNames(w, names, false, sent)
			w.subscribedBy(sent)
			c.syncAnswered()
		}
		c.log.Debug("ignoring stale request", "type", shortType(typeURL), "nonce", nonce, "current", w.sentNonce)
		return nil
	}
	switch {
	case req.GetErrorDetail() != nil:
		c.recordNack(w, req.GetVersionInfo(), nonce, req.GetErrorDetail().GetMessage())
	case req.GetVersionInfo() == w.sentVersion:
		c.recordAck(w, req.GetVersionInfo(), nonce)
	default:
		// The current nonce with an older version: the client rejected the
		// last response and is now changing its subscription.
	}
	c.syncAnswered()
	// gRPC changes its subscription inside ACKs (and after NACKs).
	wildcard := w.sotwRequest(names, star)
	if wildcard == w.resource.Wildcard && sameNames(names, w.resource.ResourceNames) {
		w.subscribedBy(sent)
		return nil
	}
	c.setNames(w, names, wildcard, sent)
	w.subscribedBy(sent)
	if !c.admitSync() {
		return nil
	}
	if !fullStateType(typeURL) {
		// Envoy repeats every EDS (RDS) name whenever a cluster (listener)
		// comes or goes. Responses of these types need not name what the
		// client already holds ("xDS REST and gRPC protocol", state of the
		// world: only LDS and CDS responses are complete), so it gets the
		// names it added and what changed, not thousands again.
		if err := c.respond(w, nil, 0, true); err != nil {
			return err
		}
		return c.flushWarming(time.Now())
	}
	return c.respondAndWarm(w)
}

// respondAndWarm answers a subscription, then sends what the answer left
// the client waiting for.
func (c *sotwStream) respondAndWarm(w *watch) error {
	if err := c.respond(w, nil, 0, false); err != nil {
		return err
	}
	return c.flushWarming(time.Now())
}

// flushWarming sends every type whose client waits for resources that no
// response has carried yet.
func (c *sotwStream) flushWarming(start time.Time) error {
	for _, w := range c.pendingWarming() {
		if err := c.respond(w, warmingRequest(start), 0, true); err != nil {
			return err
		}
	}
	return nil
}

// setNames subscribes w to names, which request set: sorted, they were
// hashed as they came and need no hashing again.
func (c *sotwStream) setNames(w *watch, names []string, wildcard bool, request requestNames) {
	var shared *nameList
	if !wildcard && len(names) > 0 {
		h := request.hash
		if !request.sorted {
			h = hashNames(names)
		}
		shared = c.s.nameLists.intern(names, h)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	was := w.resource
	if shared != nil {
		w.setSharedSubscription(shared)
	} else {
		w.setSubscription(names, wildcard)
	}
	if wildcard {
		return
	}
	if was.Wildcard {
		var gone []string
		for name := range w.sent.all() {
			if _, found := slices.BinarySearch(names, name); !found {
				gone = append(gone, name)
			}
		}
		for _, name := range gone {
			w.sent.remove(name)
		}
		return
	}
	// The client holds only names it subscribed to: it drops those that
	// left the subscription (both lists are sorted).
	for _, name := range sortedDifference(was.ResourceNames, names) {
		w.sent.remove(name)
	}
}

// sortedDifference lists the names of a that are not in b; both sorted.
func sortedDifference(a, b []string) []string {
	var out []string
	j := 0
	for _, name := range a {
		for j < len(b) && b[j] < name {
			j++
		}
		if j == len(b) || b[j] != name {
			out = append(out, name)
		}
	}
	return out
}

// push regenerates the watched types that the plan can affect for this
// proxy.
func (c *sotwStream) push(plan *pushPlan) error {
	scope := plan.scopeFor(c.proxy)
	c.pushed = false
	defer c.pin()()
	for _, typeURL := range c.order {
		w := c.watches[typeURL]
		var err error
		switch req := plan.request(scope, typeURL); {
		case req != nil && !warmsInstead(req, w):
			err = c.respond(w, req, plan.id, false)
		case req != nil || len(w.warming) > 0:
			// What a cluster or listener sent earlier in this push waits
			// for goes right after it, before the types that follow: a
			// route must not reach the client before the endpoints of
			// the cluster it names.
			err = c.respond(w, warmingRequest(plan.req.Start), 0, true)
		}
		if err != nil {
			return err
		}
	}
	c.pushDone(plan)
	return nil
}

// respond generates w and sends it. req is nil when answering a
// subscription, which is always answered; a push (from plan planID) is
// skipped when it would neither change what the client holds nor carry
// resources it waits for (w.warming). A push of a type other than LDS and
// CDS, and warmOnly, send just those and whatever else changed: EDS and
// RDS responses need not name every subscribed resource.
func (c *sotwStream) respond(w *watch, req *model.PushRequest, planID uint64, warmOnly bool) error {
	if !w.subscribed() {
		return nil
	}
	start := time.Now()
	subscription := req == nil
	if subscription {
		req = &model.PushRequest{Full: true, Start: start}
	}
	st := c.state()
	gen, err := c.generate(w, req, planID, st)
	if err != nil {
		return nil
	}
	items := gen.items
	partial := !req.Full && w.typeURL == EndpointType
	// In the state of the world only LDS and CDS responses must be
	// complete, so a push of any other type carries what changed and what
	// the client waits for. Sent in full, a service that changed its ports
	// cost every sidecar its 3 MB route configuration and all its load
	// assignments, when one small route had changed.
	if warmOnly || (!subscription && req.Full && !fullStateType(w.typeURL)) {
		items, partial = changedOrNamed(w, gen, items, w.warming), true
		if len(items) == 0 {
			if warmOnly {
				c.dropUnservable(w)
			}
			return nil
		}
	}
	if partial && len(items) == 0 {
		return nil
	}
	if !subscription && len(w.warming) == 0 && unchanged(w, gen, items, partial) {
		return nil
	}
	var hash uint64
	if len(items) == len(gen.items) {
		hash = gen.responseHash()
	} else {
		hash = responseHash(items, nil)
	}
	if w.nackWithholds && hash == w.nackedHash {
		c.log.Debug("withholding a response identical to the one the client rejected", "type", shortType(w.typeURL))
		return nil
	}

	resp := &encodedResponse{
		typeURL: w.typeURL,
		body:    st.bodies.get(bodyKey{typeURL: w.typeURL, version: st.version, hash: hash, resources: len(items)}, items),
		nonce:   c.s.nextNonce(),
	}
	if err := c.send(func() error { return c.stream.SendMsg(resp) }); err != nil {
		w.metrics.sendFailed(err)
		return err
	}
	now := time.Now()
	c.markWarming(w, gen, items, st)

	c.mu.Lock()
	if partial {
		for _, it := range items {
			w.sent.set(it.name, sentResource{version: it.version, resource: it.resource})
		}
		// The client holds every item of a complete generation now (what
		// it lacked or held in another version was just sent); holding
		// nothing else, it holds exactly that generation, which becomes
		// its shared base again instead of a growing list of changes.
		if req.Full && w.sent.len() == len(gen.items) {
			w.sent.reset(gen)
		}
	} else {
		w.sent.reset(gen)
	}
	w.sentNonce, w.sentVersion, w.sentHash, w.lastPush = resp.nonce, st.version, hash, now
	w.warming = nil
	c.mu.Unlock()

	c.recordPush(w, req, start, now, subscription, len(items), resp.body.values, resp.nonce, st.version)
	return nil
}

// unchanged reports whether sending items, of gen, would leave the client
// as it is.
func unchanged(w *watch, gen *generation, items []generated, partial bool) bool {
	if !partial {
		if w.sent.is(gen) {
			return true
		}
		if len(items) != w.sent.len() {
			return false
		}
		if len(items) == len(gen.items) {
			if base, whole := w.sent.whole(); whole && base != nil {
				return len(gen.changedSince(base)) == 0
			}
			if w.sent.base != nil {
				return len(w.sent.changedIn(gen, nil)) == 0
			}
		}
	}
	for _, it := range items {
		if prev, ok := w.sent.get(it.name); !ok || prev.version != it.version {
			return false
		}
	}
	return true
}

// recordPush counts a response of resources, size bytes of values, in the
// metrics and the debug log.
func (c *connection) recordPush(w *watch, req *model.PushRequest, start, now time.Time, subscription bool,
	resources, size int, nonce, version string,
) {
	w.metrics.pushed(now.Sub(start), size)
	if !subscription {
		c.pushed = true
		if !req.Start.IsZero() {
			c.s.metrics.convergence.Observe(now.Sub(req.Start).Seconds())
		}
	}
	c.log.Debug("sent", "type", shortType(w.typeURL), "nonce", nonce, "version", version, "resources", resources,
		"bytes", size, "subscription", subscription)
}

// pushDone ends a push to this connection: if it sent anything, the proxy
// has converged on the push's changes.
func (c *connection) pushDone(plan *pushPlan) {
	if c.pushed {
		c.s.metrics.converged(plan.req.Start)
		c.pushed = false
	}
}
