package xds

import (
	"slices"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// wildcardName subscribes a stream, SotW or delta, to every resource of a
// type, and may come with other names ("How the client specifies what
// resources to return" in the xDS protocol).
const wildcardName = "*"

// DeltaAggregatedResources serves an incremental (delta) ADS stream.
func (s *Server) DeltaAggregatedResources(stream grpc.BidiStreamingServer[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]) error {
	c := s.newConnection(true)
	delta := &deltaStream{connection: c, stream: stream}
	return serveStream(stream.Context(), c, stream.Recv, delta.handle, delta.push)
}

type deltaStream struct {
	*connection
	stream grpc.BidiStreamingServer[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]
}

// handle records an ACK or NACK if the request carries one, applies its
// subscription changes (delta requests are never ignored as a whole: their
// subscription changes are increments that would otherwise be lost), and
// answers new subscriptions.
func (c *deltaStream) handle(req *discoveryv3.DeltaDiscoveryRequest) error {
	if err := c.initialize(req.GetNode()); err != nil {
		return err
	}
	typeURL := req.GetTypeUrl()
	if ok, err := c.served(typeURL); err != nil || !ok {
		if err == nil && c.unservedType(typeURL, req.GetResponseNonce()) {
			// Listing what it asked for as removed tells a delta client that
			// none of it exists.
			resp := &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: c.s.current.Load().version, TypeUrl: typeURL,
				Nonce: c.s.nextNonce(), RemovedResources: slices.DeleteFunc(slices.Clone(req.GetResourceNamesSubscribe()),
					func(n string) bool { return n == wildcardName })}
			return c.send(func() error { return c.stream.Send(resp) })
		}
		return err
	}
	w := c.watches[typeURL]
	first := w == nil
	if first {
		w = c.addWatch(typeURL)
	}
	if nonce := req.GetResponseNonce(); nonce != "" {
		switch {
		case nonce != w.sentNonce:
			c.log.Debug("stale nonce", "type", shortType(typeURL), "nonce", nonce, "current", w.sentNonce)
		case req.GetErrorDetail() != nil:
			c.recordNack(w, w.sentVersion, nonce, req.GetErrorDetail().GetMessage())
		default:
			c.recordAck(w, w.sentVersion, nonce)
		}
		c.syncAnswered()
	}
	sub, err := c.applySubscriptions(w, req, first)
	if err != nil {
		return err
	}
	// An on-demand node proxy is sent resources under names it never
	// subscribed to (a VIP brings the Pods behind it, with the VIP only as
	// their alias), so unsubscribing a name does not tell the server to
	// forget them: unanswered, the client would hold them, stale, until
	// some later push, or for good once nothing is left subscribed. The
	// answer removes what no remaining name brings.
	unsubscribed := !first && w.typeURL == AddressType && !w.resource.Wildcard && len(req.GetResourceNamesUnsubscribe()) > 0
	if first || sub.wildcardAdded || len(sub.added) > 0 || unsubscribed || sub.crossed {
		if !c.admitSync() {
			return nil
		}
		if err := c.respond(w, nil, 0, sub.added, first, false); err != nil {
			return err
		}
		return c.flushWarming(time.Now())
	}
	return nil
}

// flushWarming sends every type whose client waits for resources that no
// response has carried yet (see warming.go).
func (c *deltaStream) flushWarming(start time.Time) error {
	for _, w := range c.pendingWarming() {
		if err := c.respond(w, warmingRequest(start), 0, nil, false, true); err != nil {
			return err
		}
	}
	return nil
}

// subscriptionChange is what a delta request did to a watch's subscription.
type subscriptionChange struct {
	// added are the names it subscribes to, new or again.
	added []string
	// wildcardAdded: it subscribes to the wildcard, for the first time or
	// again.
	wildcardAdded bool
	// crossed: it unsubscribes from names that the last response, not yet
	// answered, may have carried; the client is still counted as holding
	// them, and the answer removes them.
	crossed bool
}

// applySubscriptions updates w from the request. Each list is sorted once
// and merged into the subscription in one pass: inserted one name at a
// time, 100,000 names took seconds under c.mu.
func (c *deltaStream) applySubscriptions(w *watch, req *discoveryv3.DeltaDiscoveryRequest, first bool) (subscriptionChange, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	wasWildcard := w.resource.Wildcard
	legacy := first && deltaWildcardType(w.typeURL) && len(req.GetResourceNamesSubscribe()) == 0
	added, star := splitWildcard(sortedNames(req.GetResourceNamesSubscribe()))
	dropped, unstar := splitWildcard(sortedNames(req.GetResourceNamesUnsubscribe()))
	wildcard := (wasWildcard || legacy || star) && !unstar
	names := sortedUnion(w.resource.ResourceNames, added)
	if len(dropped) > 0 {
		names = sortedDifference(names, dropped)
	}
	if err := c.checkSubscribed(w, len(names)); err != nil {
		return subscriptionChange{}, err
	}

	// A name subscribed to again, or one the wildcard already brought, is
	// sent again, changed or not: "the client may have 'forgotten' those
	// resources despite apparently remaining subscribed" ("Subscribing to
	// Resources" under Incremental xDS). What the server believes the
	// client holds does not spare it; only the client's own word does, its
	// initial_resource_versions, which come with the first request, before
	// anything is held. Load assignments are sent all the same: any EDS
	// cluster the client holds may be warming, for an update that the old
	// stream brought just before it broke or that this stream's CDS answer
	// brings before this request is read, and Envoy's EDS cluster warms
	// until a response carries its assignment, changed or not (see
	// warming.go), which the client, holding its latest version, cannot
	// ask for.
	var again []string
	if star && wasWildcard {
		for held := range w.sent.all() {
			again = append(again, held)
		}
	}
	for _, name := range added {
		if _, held := w.sent.get(name); held {
			again = append(again, name)
		}
	}
	w.resend(again)
	crossed := false
	if !wildcard {
		// The client forgets what it unsubscribed from, unless a response
		// that carries it may have crossed the request: a client that
		// stores what it receives whether it asked for it or not would
		// then hold a copy that no later push removes.
		inFlight := w.awaitsAnswer()
		for _, name := range dropped {
			_, held := w.sent.get(name)
			switch {
			case held && inFlight:
				crossed = true
			case held:
				w.sent.remove(name)
			}
		}
	}
	if first && w.typeURL != EndpointType {
		for name, version := range req.GetInitialResourceVersions() {
			w.sent.set(name, sentResource{version: version})
		}
	}
	w.setSubscription(names, wildcard)
	return subscriptionChange{added: added, wildcardAdded: wildcard && (!wasWildcard || star), crossed: crossed}, nil
}

// push regenerates the watched types that the plan can affect for this
// proxy.
func (c *deltaStream) push(plan *pushPlan) error {
	scope := plan.scopeFor(c.proxy)
	c.pushed = false
	defer c.pin()()
	for _, typeURL := range c.order {
		w := c.watches[typeURL]
		var err error
		switch req := plan.request(scope, typeURL); {
		case req != nil && !warmsInstead(req, w):
			err = c.respond(w, req, plan.id, nil, false, false)
		case req != nil || len(w.warming) > 0:
			// Right after the cluster or listener that waits for it, as
			// in the state of the world (sotwStream.push).
			err = c.respond(w, warmingRequest(plan.req.Start), 0, nil, false, true)
		}
		if err != nil {
			return err
		}
	}
	c.pushDone(plan)
	return nil
}

// respond generates w and sends what differs from what the client holds.
// req is nil when answering a subscription (planID is the push plan's
// otherwise); added are the names it just subscribed to, and first marks
// the type's first request, which is always answered so that the client
// knows it is in sync. Resources the client waits for after a CDS or LDS
// update (w.warming, see warming.go) are sent even when unchanged; warmOnly
// regenerates w just for them.
func (c *deltaStream) respond(w *watch, req *model.PushRequest, planID uint64, added []string, first, warmOnly bool) error {
	// A watch with nothing subscribed has nothing to answer but the
	// removal of what the client still holds.
	if !w.subscribed() && !first && w.sent.len() == 0 {
		return nil
	}
	start := time.Now()
	subscription := req == nil
	if subscription {
		req = &model.PushRequest{Full: true, Start: start}
	}
	st := c.state()
	var gen *generation
	var items []generated
	if w.subscribed() {
		var err error
		if gen, err = c.generate(w, req, planID, st); err != nil {
			return nil
		}
		items = gen.items
	}
	// A partial result says nothing about the resources it leaves out, and
	// neither does a warming one.
	partial := (!req.Full && w.typeURL == EndpointType) || warmOnly
	changed := changedOrNamed(w, gen, items, w.warming)
	if warmOnly && len(changed) == 0 {
		c.dropUnservable(w)
		return nil
	}
	if partial && len(items) == 0 {
		return nil
	}
	var removed []string
	if !partial {
		removed = removedNames(w, items, added)
	}
	if len(changed) == 0 && len(removed) == 0 && !first {
		return nil
	}
	hash := responseHash(changed, removed)
	if w.nackWithholds && hash == w.nackedHash && !first {
		return nil
	}

	resp := &discoveryv3.DeltaDiscoveryResponse{
		SystemVersionInfo: st.version,
		Resources:         make([]*discoveryv3.Resource, len(changed)),
		RemovedResources:  removed,
		TypeUrl:           w.typeURL,
		Nonce:             c.s.nextNonce(),
	}
	for i, it := range changed {
		resp.Resources[i] = &discoveryv3.Resource{Name: it.name, Version: it.version, Resource: it.resource, Aliases: it.aliases}
	}
	if err := c.send(func() error { return c.stream.Send(resp) }); err != nil {
		w.metrics.sendFailed(err)
		return err
	}
	now := time.Now()
	c.markWarming(w, gen, changed, st)

	c.mu.Lock()
	if w.sent.len() == 0 && len(changed) == len(items) && gen != nil {
		// A first answer holds what identical streams share (sentSet).
		w.sent.reset(gen)
	} else {
		for _, it := range changed {
			w.sent.set(it.name, sentResource{version: it.version, resource: it.resource})
		}
		for _, name := range removed {
			w.sent.remove(name)
		}
	}
	w.sentNonce, w.sentVersion, w.sentHash, w.lastPush = resp.Nonce, st.version, hash, now
	w.warming = nil
	c.mu.Unlock()

	c.recordPush(w, req, start, now, subscription, len(changed), valuesSize(changed), resp.Nonce, st.version)
	return nil
}

// removedNames lists, sorted, the resources the client holds that a full
// generation no longer produced, plus the names it just subscribed to that
// do not exist (so that it need not wait for them).
func removedNames(w *watch, items []generated, added []string) []string {
	if w.sent.len() == 0 && len(added) == 0 {
		return nil
	}
	present := make(map[string]struct{}, len(items))
	for _, it := range items {
		present[it.name] = struct{}{}
		// A name answered under another resource's name (an alias) exists.
		for _, a := range it.aliases {
			present[a] = struct{}{}
		}
	}
	var removed []string
	for name := range w.sent.all() {
		if _, ok := present[name]; !ok {
			removed = append(removed, name)
		}
	}
	for _, name := range added {
		if _, ok := present[name]; ok {
			continue
		}
		if _, held := w.sent.get(name); !held {
			removed = append(removed, name)
		}
	}
	slices.Sort(removed)
	return removed
}

// valuesSize is the size of the values of items, as the response-size
// metrics report it.
func valuesSize(items []generated) int {
	n := 0
	for _, it := range items {
		n += len(it.resource.GetValue())
	}
	return n
}
