package envoygen

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// Well-known Envoy extension names used by listeners and routes.
const (
	httpConnectionManagerFilter = "envoy.filters.network.http_connection_manager"
	tcpProxyFilter              = "envoy.filters.network.tcp_proxy"
	routerHTTPFilter            = "envoy.filters.http.router"
	originalDstListenerFilter   = "envoy.filters.listener.original_dst"
	previousHostsRetryPredicate = "envoy.retry_host_predicates.previous_hosts"
)

// wildcardAddress is where the per-port and virtual listeners live. They
// never bind it themselves (except the virtual ones): iptables sends traffic
// to the virtual listeners, which hand it to the per-port ones.
const wildcardAddress = "0.0.0.0"

// packLR wraps m in an Any with deterministic encoding, so identical
// resources have identical bytes and stable versions.
func packLR(m proto.Message) (*anypb.Any, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("envoygen: marshal %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return &anypb.Any{
		TypeUrl: resource.APITypePrefix + string(m.ProtoReflect().Descriptor().FullName()),
		Value:   b,
	}, nil
}

// mustPackLR is packLR for fixed messages built at construction time, whose
// marshalling cannot fail.
func mustPackLR(m proto.Message) *anypb.Any {
	a, err := packLR(m)
	if err != nil {
		panic(err)
	}
	return a
}

func packResourceLR(name string, m proto.Message) (model.Resource, error) {
	a, err := packLR(m)
	if err != nil {
		return model.Resource{}, err
	}
	return model.Resource{Name: name, Resource: a}, nil
}

// adsRouteSource is where an HCM fetches its routes: over the same ADS
// stream, with initial_fetch_timeout 0. The server follows every LDS
// update with the changed listeners' routes (pkg/xds warming.go), so a
// warming listener waits only for them; with a timeout it would go live
// without routes and answer 404 until they came.
func adsRouteSource() *core.ConfigSource {
	return &core.ConfigSource{
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
		InitialFetchTimeout:   durationpb.New(0),
		ResourceApiVersion:    core.ApiVersion_V3,
	}
}

func socketAddress(ip string, port uint32) *core.Address {
	return &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
		Address:       ip,
		PortSpecifier: &core.SocketAddress_PortValue{PortValue: port},
	}}}
}

// proxyRuleScope is what, besides the namespace, decides which
// DestinationRules a proxy sees: its labels, but only when a rule in its
// namespace has a workloadSelector. Proxies with equal scopes get equal
// outbound listeners and routes.
type proxyRuleScope struct {
	namespace string
	labels    string
}

func ruleScopeOf(proxy *model.Proxy, push *pushcontext.PushContext) proxyRuleScope {
	s := proxyRuleScope{namespace: proxy.Namespace}
	if len(proxy.Labels) > 0 && (push.HasWorkloadSelectorRules(proxy.Namespace) || push.RoutesDependOnSourceLabels(proxy.Namespace)) {
		s.labels = canonicalLabels(proxy.Labels)
	}
	return s
}

// canonicalLabels renders labels as one string that is equal for equal maps.
func canonicalLabels(labels map[string]string) string {
	keys := slices.Sorted(maps.Keys(labels))
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(labels[k])
		b.WriteByte(0)
	}
	return b.String()
}

// lrCache holds values derived from one push context version, shared by
// every proxy that asks for the same key. It keeps the two newest versions,
// so connections still finishing a push with the previous snapshot neither
// evict nor thrash the new one's entries.
type lrCache struct {
	mu   sync.Mutex
	gens [2]*lrGeneration
}

type lrGeneration struct {
	version string
	entries sync.Map // key -> *lrEntry

	// Many small shared pieces, kept in plain maps, which are cheaper than
	// entries per piece: marshalled virtual hosts (shared by route
	// configurations) and per-port listeners (shared by namespaces).
	vhosts    lrTable[vhostKey, []byte]
	listeners lrTable[listenerKey, model.Resource]
}

// lrEntry is built once: concurrent first requests for a key wait for one
// build instead of each doing the same work.
type lrEntry struct {
	once  sync.Once
	value any
	err   error
}

// lrTable is a concurrent map for values that are cheap to build twice: a
// concurrent build of the same key stores an equal value.
type lrTable[K comparable, V any] struct {
	mu sync.RWMutex
	m  map[K]V
}

func (t *lrTable[K, V]) get(k K) (V, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	v, ok := t.m[k]
	return v, ok
}

// addAll stores a batch, so a build takes the write lock once.
func (t *lrTable[K, V]) addAll(keys []K, values []V) {
	if len(keys) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[K]V, len(keys))
	}
	for i, k := range keys {
		t.m[k] = values[i]
	}
}

func (c *lrCache) generation(version string) *lrGeneration {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range c.gens {
		if g != nil && g.version == version {
			return g
		}
	}
	g := &lrGeneration{version: version}
	c.gens[1] = c.gens[0]
	c.gens[0] = g
	return g
}

// get returns the value for key, building it with build on first use.
func (g *lrGeneration) get(key any, build func() (any, error)) (any, error) {
	v, ok := g.entries.Load(key)
	if !ok {
		v, _ = g.entries.LoadOrStore(key, &lrEntry{})
	}
	e := v.(*lrEntry)
	e.once.Do(func() { e.value, e.err = build() })
	return e.value, e.err
}

// lrProblems records config that listeners and routes had to drop,
// once per push context, and logs it the first time.
type lrProblems struct {
	logger *slog.Logger
	push   *pushcontext.PushContext
}

func (r lrProblems) report(key model.ConfigKey, reason string) {
	if r.push.ReportProblem(key, reason) {
		r.logger.Warn("config partly dropped", "kind", key.Kind.String(), "namespace", key.Namespace,
			"name", key.Name, "reason", reason)
	}
}

// ruleKey names the DestinationRule whose traffic policy a merged rule
// carries: Istio keeps the oldest rule's policy when it merges rules.
func ruleKey(dr *pushcontext.DestinationRule) model.ConfigKey {
	k := model.ConfigKey{Kind: model.KindDestinationRule}
	if len(dr.From) > 0 {
		k.Namespace, k.Name = dr.From[0].Namespace, dr.From[0].Name
	}
	return k
}

func serviceKey(svc *model.Service) model.ConfigKey {
	return model.ConfigKey{Kind: model.KindService, Namespace: svc.Namespace, Name: svc.Name}
}

// filterByName keeps the resources whose names a non-wildcard subscription
// lists (names sorted, as the server keeps them).
func filterByName(res model.Resources, w *model.WatchedResource) model.Resources {
	if w == nil || w.Wildcard {
		return res
	}
	out := make(model.Resources, 0, len(w.ResourceNames))
	for _, r := range res {
		if _, found := slices.BinarySearch(w.ResourceNames, r.Name); found {
			out = append(out, r)
		}
	}
	return out
}
