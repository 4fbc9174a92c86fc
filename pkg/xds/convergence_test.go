package xds

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/xds/envoygen"
	"github.com/meshpilot/meshpilot/pkg/xds/grpcgen"
	"github.com/meshpilot/meshpilot/pkg/xds/loadassign"
	"github.com/meshpilot/meshpilot/pkg/xds/wdsgen"
)

// convergenceSeeds are the seeds TestConvergence runs by default: some 680
// store changes, 90 steps that close or reopen a client's stream, and 100
// checkpoints, in about ten seconds under -race on two cores.
var convergenceSeeds = []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}

// convergenceSeedsEnv runs other seeds instead, an inclusive range
// ("100-399") or one seed ("17", to replay a failure).
const convergenceSeedsEnv = "MESHPILOT_CONVERGENCE_SEEDS"

const (
	// convDebounce is the server's debounce; steps pause up to 1.5 times it.
	convDebounce = 5 * time.Millisecond
	// convInitialSteps build the world the server starts with.
	convInitialSteps = 15
	// convMinSteps and convMaxSteps bound the steps applied while the
	// clients are connected.
	convMinSteps, convMaxSteps = 40, 80
	// convSettleLimit bounds the wait for quiescence. Only a failing run
	// waits that long: no assertion is about time.
	convSettleLimit = 15 * time.Second
	// convCheckpointOdds: after one step in this many (and after the last)
	// the long-lived clients are compared with fresh ones. A push that
	// misses a change is often made good by a later push that regenerates
	// the same type (any rule change a proxy sees regenerates all of its
	// clusters), so what a check finds is mostly in the steps just before
	// it: many checks find more than one at the end.
	convCheckpointOdds = 8
	// convStreamOdds: before one step in this many, a long-lived client
	// loses its stream (see convStreamBreaks).
	convStreamOdds = 10
	// convMaxMissed bounds the store steps a client that lost its stream
	// misses before it opens a new one.
	convMaxMissed = 2
)

// TestConvergence checks the invariant every push must keep: once the
// server is quiet, a proxy that lived through any sequence of changes
// serves exactly what a proxy connecting now is served. For each seed it
// starts a server on a random world, connects Envoy-semantics clients
// (SotW and delta; sidecars in two namespaces and the ingress gateway) and
// a gRPC-semantics one (a proxyless application), and applies random
// store changes with random pauses around the debounce. Now and then a
// long-lived client loses its stream and opens a new one, at once or after
// missing a few changes, keeping what it holds as Envoy and gRPC do. At
// random checkpoints, and after the last step, it waits until every step
// is pushed and every client warm (or answered) and ACKed, connects a
// fresh client of each kind, and compares every type, resource by
// resource. It then does the same with fresh clients of a second server,
// started on the world as it is at the checkpoint.
//
// A push that leaves out a change (a scope too narrow, a warming
// dependency not re-sent, a subscription change answered wrongly), or an
// answer to a new stream that trusts the wrong part of what the client
// says it holds, leaves a long-lived client with stale or missing
// resources, which the fresh one does not have. The steps of a seed are
// fixed; only timing varies from run to run, and the invariant must hold
// whatever it is. A failure names the seed and lists the steps.
//
// To run other seeds: MESHPILOT_CONVERGENCE_SEEDS=100-399 go test -race
// -run TestConvergence ./pkg/xds/ (one seed, "17", replays a failure).
func TestConvergence(t *testing.T) {
	seeds := convergenceSeeds
	if spec := os.Getenv(convergenceSeedsEnv); spec != "" {
		var err error
		if seeds, err = parseSeedRange(spec); err != nil {
			t.Fatalf("%s=%q: %v", convergenceSeedsEnv, spec, err)
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runConvergence(t, seed) })
	}
}

func parseSeedRange(spec string) ([]uint64, error) {
	from, to, isRange := strings.Cut(spec, "-")
	first, err := strconv.ParseUint(strings.TrimSpace(from), 10, 64)
	if err != nil {
		return nil, err
	}
	last := first
	if isRange {
		if last, err = strconv.ParseUint(strings.TrimSpace(to), 10, 64); err != nil {
			return nil, err
		}
	}
	if last < first {
		return nil, fmt.Errorf("empty range")
	}
	var seeds []uint64
	for s := first; s <= last; s++ {
		seeds = append(seeds, s)
	}
	return seeds, nil
}

// convProxy is a kind of proxy the test connects, long-lived and fresh,
// and the identity ("namespace/service-account") its clients prove. A
// proxyless gRPC application (grpcListeners set) subscribes to those
// listeners and what they lead to, over SotW alone as grpc-go does; a node
// proxy follows workload discovery over delta; the others are Envoys, over
// both variants of ADS.
type convProxy struct {
	name          string
	identity      string
	node          func(id int) *corev3.Node
	grpcListeners []string
	nodeProxy     bool
}

var convProxies = []convProxy{
	{name: "sidecar in apps", identity: convApps + "/client", node: func(id int) *corev3.Node { return convSidecarNode(convApps, id, "") }},
	{name: "sidecar in web", identity: convWeb + "/client", node: func(id int) *corev3.Node { return convSidecarNode(convWeb, id, "") }},
	{name: "ingress gateway", identity: convRoot + "/istio-ingressgateway", node: func(id int) *corev3.Node {
		node := gatewayNode()
		node.Id = fmt.Sprintf("router~%s~gateway-%d.istio-system~istio-system.svc.cluster.local", convNodeIP(2, id), id)
		return node
	}},
	{name: "gRPC application in apps", identity: convApps + "/client",
		node: func(id int) *corev3.Node { return convSidecarNode(convApps, id, "grpc") },
		// Targets in each form a dial target may take (a short name
		// resolves in the client's namespace), on ports the Services have
		// in some steps and not in others; and the inbound listener of a
		// gRPC server on the client Pod's address.
		grpcListeners: []string{"a.apps.svc.cluster.local:80", "a:8000", "b.apps:9090", "d.web.svc.cluster.local:80",
			"e.web.svc.cluster.local:3306", grpcgen.InboundListenerPrefix + convClientIPs[convApps] + ":8080"}},
	{name: "node proxy", identity: convRoot + "/ztunnel", nodeProxy: true, node: func(id int) *corev3.Node {
		return &corev3.Node{Id: fmt.Sprintf("ztunnel~%s~ztunnel-%d.istio-system~istio-system.svc.cluster.local", convNodeIP(9, id), id)}
	}},
}

// convNodeIP is the address of client id of a kind of proxy (a network
// 10.<kind>.0.0/16 of its own): a seed connects hundreds of clients.
func convNodeIP(kind, id int) string {
	return fmt.Sprintf("10.%d.%d.%d", kind, id>>8&0xff, id&0xff)
}

// convSidecarNode is a sidecar of namespace ns on the namespace's client
// Pod's address, served by generator ("" for Envoy's). Each client has a
// Pod name of its own, so none is named by its node ID, and every one of
// them is that Pod's workload.
func convSidecarNode(ns string, id int, generator string) *corev3.Node {
	fields := map[string]any{"NAMESPACE": ns, "INSTANCE_IPS": convClientIPs[ns], "LABELS": map[string]any{"app": "client"}}
	if generator != "" {
		fields["GENERATOR"] = generator
	}
	meta, err := structpb.NewStruct(fields)
	if err != nil {
		panic(err)
	}
	return &corev3.Node{Id: fmt.Sprintf("sidecar~%s~client-%d.%s~%s.svc.cluster.local", convClientIPs[ns], id, ns, ns), Metadata: meta}
}

// convPair is a long-lived client and the fresh client it must match.
type convPair struct {
	name        string
	proxy       convProxy
	mode        xdstest.Mode
	long, fresh convClient
}

// convClient is what the test needs of a client: Envoy's model
// (*xdstest.EnvoyClient), gRPC's (*xdstest.GRPCClient) or a node proxy's
// (*xdstest.NodeProxyClient).
type convClient interface {
	Active() xdstest.Snapshot
	Nacks() []xdstest.Nack
	Err() error
	Disconnect()
	Reconnect()
	Close()
}

// unsettled is what a client still waits for from the server: an Envoy's
// warming clusters and listeners, the names a gRPC client asked for and
// has had no answer to, a node proxy's first answer on its stream.
func unsettled(c convClient) []string {
	var out []string
	switch c := c.(type) {
	case *xdstest.EnvoyClient:
		for _, w := range c.Warming() {
			out = append(out, w.String())
		}
	case *xdstest.GRPCClient:
		for _, typ := range c.Awaiting() {
			out = append(out, "no answer yet to its subscription to "+typ)
		}
	case *xdstest.NodeProxyClient:
		if !c.Answered() {
			out = append(out, "not answered yet on its stream")
		}
	}
	return out
}

// convPairs are the pairs the test connects, one per kind of proxy and ADS
// variant, without their clients; steps name a long-lived client by its
// index here.
var convPairs = func() []convPair {
	var out []convPair
	for _, p := range convProxies {
		modes := []xdstest.Mode{xdstest.SotW, xdstest.Delta}
		switch {
		case p.grpcListeners != nil:
			modes = modes[:1]
		case p.nodeProxy:
			modes = modes[1:]
		}
		for _, mode := range modes {
			out = append(out, convPair{name: p.name + " (" + mode.String() + ")", proxy: p, mode: mode})
		}
	}
	return out
}()

func runConvergence(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x636f6e76)) // "conv"
	initial := convSteps(r, convInitialSteps, convDebounce, false)
	steps := convSteps(r, convMinSteps+r.IntN(convMaxSteps-convMinSteps+1), convDebounce, true)
	for i := range steps {
		steps[i].checkpoint = i == len(steps)-1 || chance(r, convCheckpointOdds)
	}
	steps = convStreamBreaks(rand.New(rand.NewPCG(seed, 0x7374726d)), steps, convDebounce) // "strm"
	convergeThrough(t, initial, steps, func(step int, problems string) {
		t.Helper()
		t.Errorf("seed %d, at the checkpoint after step %d: %s\n\nreplay: %s=%d go test -race -run TestConvergence ./pkg/xds/\n\n%s",
			seed, step, problems, convergenceSeedsEnv, seed, describeSteps(initial, steps))
	})
}

// convStreamBreaks places breaks of the long-lived clients' streams among
// steps. Its draws are its own, so that a seed keeps the store steps and
// checkpoints it had before streams broke. Before a step, once in
// convStreamOdds, a client chosen at random loses its stream, after a
// pause drawn like any step's, so that it may be in the middle of a push;
// it opens a new one at once, or after missing up to convMaxMissed store
// steps, and at the latest right before a checkpoint (which then follows
// the reconnection). One client at a time is without a stream.
func convStreamBreaks(r *rand.Rand, steps []convStep, debounce time.Duration) []convStep {
	streamStep := func(client int, what string, act func(convClient)) convStep {
		return convStep{pause: convPause(r, debounce), desc: fmt.Sprintf("the long-lived %s client %s", convPairs[client].name, what),
			stream: func(long []*convPair) { act(long[client].long) }}
	}
	var out []convStep
	away, missed := -1, 0 // the client without a stream, and the store steps it still misses
	for _, s := range steps {
		if away < 0 && chance(r, convStreamOdds) {
			client := r.IntN(len(convPairs))
			if missed = r.IntN(convMaxMissed + 1); missed == 0 {
				out = append(out, streamStep(client, "reconnects", convClient.Reconnect))
			} else {
				away = client
				out = append(out, streamStep(client, "loses its stream", convClient.Disconnect))
			}
		}
		out = append(out, s)
		if away < 0 {
			continue
		}
		if missed--; missed == 0 || s.checkpoint {
			back := streamStep(away, "opens a new stream", convClient.Reconnect)
			back.checkpoint, out[len(out)-1].checkpoint = s.checkpoint, false
			out = append(out, back)
			away = -1
		}
	}
	return out
}

// convergeThrough starts a server on the world that initial makes, connects
// the long-lived clients, applies steps, and at every checkpoint compares
// them with fresh clients; report gets the first failure, with the number
// of the step after which it was found.
func convergeThrough(t *testing.T, initial, steps []convStep, report func(step int, problems string)) {
	t.Helper()
	// worldAfter applies the initial steps and the first n steps' store
	// changes: the world as it is once step n is taken.
	worldAfter := func(st model.Store, n int) {
		for _, s := range initial {
			s.apply(st)
		}
		for _, s := range steps[:n] {
			if s.apply != nil {
				s.apply(st)
			}
		}
	}
	h := newConvHarness(t, func(st model.Store) { worldAfter(st, 0) })
	ids := 0
	connect := func(h *harness, p convProxy, mode xdstest.Mode) convClient {
		ids++
		conn := provingConn{h.conn, p.identity}
		switch {
		case p.grpcListeners != nil:
			return xdstest.NewGRPCClient(t, conn, p.node(ids), p.grpcListeners...)
		case p.nodeProxy:
			return xdstest.NewNodeProxyClient(t, conn, p.node(ids), wdsgen.AddressType, wdsgen.AuthorizationType)
		}
		return xdstest.NewEnvoyClient(t, conn, p.node(ids), mode)
	}
	var pairs []*convPair
	for _, p := range convPairs {
		p.long = connect(h, p.proxy, p.mode)
		pairs = append(pairs, &p)
	}
	// The long-lived clients hold the initial world before the first
	// step, so that every step is a change they must follow.
	h.eventuallyWithin("the long-lived clients to warm", convSettleLimit, func() bool {
		for _, p := range pairs {
			if len(unsettled(p.long)) > 0 {
				return false
			}
		}
		return len(serverBusy(h)) == 0
	})

	checkpoints, streamSteps := 0, 0
	for i, s := range steps {
		time.Sleep(s.pause)
		if s.stream != nil {
			s.stream(pairs)
			streamSteps++
		} else {
			s.apply(h.store)
		}
		if !s.checkpoint {
			continue
		}
		checkpoints++
		awaitSentinel(h, checkpoints)
		for _, p := range pairs {
			p.fresh = connect(h, p.proxy, p.mode)
		}
		if problems := awaitConvergence(h, pairs); problems != "" {
			report(i+1, problems)
			return
		}
		for _, p := range pairs {
			p.fresh.Close()
		}
		h.eventually("the fresh clients to go", func() bool { return len(h.server.connections()) == len(pairs) })

		// The fresh clients above share the server's caches with the
		// long-lived ones (load assignments, workload addresses, anything
		// a generation reuses from the one before), so a cache that kept
		// a stale entry would serve both alike. A server that starts on
		// the world as it is now has caches that never saw the steps: its
		// clients must be served what the long-lived clients hold.
		cold := newConvHarness(t, func(st model.Store) {
			worldAfter(st, i+1)
			moveSentinel(st, checkpoints)
		})
		for _, p := range pairs {
			p.fresh = connect(cold, p.proxy, p.mode)
		}
		if problems := awaitConvergence(cold, pairs); problems != "" {
			report(i+1, "against a server started on the world as it is now: "+problems)
			return
		}
		for _, p := range pairs {
			p.fresh.Close()
		}
	}
	// With -v, a glance tells that the seed's world was not empty.
	var sizes []string
	for _, p := range pairs {
		s := p.long.Active()
		sizes = append(sizes, fmt.Sprintf("%s: %d clusters, %d load assignments, %d listeners, %d routes, %d secrets, %d addresses", p.name,
			len(s.Clusters), len(s.Endpoints), len(s.Listeners), len(s.Routes), len(s.Secrets), len(s.Workload[wdsgen.AddressType])))
	}
	t.Logf("%d steps (%d of them streams closing or opening), %d checkpoints; converged to\n%s",
		len(steps), streamSteps, checkpoints, strings.Join(sizes, "\n"))
}

// newConvHarness starts a server, with generators of its own, on the base
// world and what seed adds to it.
func newConvHarness(t *testing.T, seed func(model.Store)) *harness {
	t.Helper()
	return newHarness(t, harnessConfig{debounceAfter: convDebounce, generatorsFor: convGeneratorSets(), authenticate: convAuthenticate,
		seed: func(st model.Store) {
			convBaseWorld(st)
			seed(st)
		}})
}

// convGeneratorSets serves each proxy as the control plane does: workload
// discovery to node proxies, gRPC's generators to a node that asks for
// them, Envoy's to the others, with one cache of load assignments shared
// by the last two.
func convGeneratorSets() func(*model.Proxy) map[string]Generator {
	assignments := new(loadassign.Cache)
	envoy, grpc, node := map[string]Generator{}, map[string]Generator{}, map[string]Generator{}
	for typeURL, g := range wdsgen.New(wdsgen.Options{}).ByTypeURL() {
		node[typeURL] = g
	}
	for typeURL, g := range envoygen.New(envoygen.Options{DomainSuffix: "cluster.local", LoadAssignments: assignments}).ByTypeURL() {
		envoy[typeURL] = g
	}
	for typeURL, g := range grpcgen.New(grpcgen.Options{DomainSuffix: "cluster.local", LoadAssignments: assignments}).ByTypeURL() {
		grpc[typeURL] = g
	}
	return func(p *model.Proxy) map[string]Generator {
		switch {
		case p.Type == model.NodeProxy:
			return node
		case p.Generator == "grpc":
			return grpc
		}
		return envoy
	}
}
