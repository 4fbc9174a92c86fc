package xds

import (
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// countingGenerator counts complete and partial generations.
type countingGenerator struct {
	inner         Generator
	full, partial atomic.Int64
}

func (g *countingGenerator) Generate(p *model.Proxy, pc *pushcontext.PushContext, w *model.WatchedResource, req *model.PushRequest) (model.Resources, error) {
	if req.Full {
		g.full.Add(1)
	} else {
		g.partial.Add(1)
	}
	return g.inner.Generate(p, pc, w, req)
}

// countingSet wraps the stamped generators; counters are by short type.
func countingSet() (map[string]Generator, map[string]*countingGenerator) {
	set, counters := map[string]Generator{}, map[string]*countingGenerator{}
	for typeURL, g := range stampedGenerators() {
		if typeURL == probeType {
			set[typeURL] = g
			continue
		}
		cg := &countingGenerator{inner: g}
		set[typeURL], counters[shortType(typeURL)] = cg, cg
	}
	return set, counters
}

type nodeSpec struct {
	kind, name, ns, ip string
	labels             map[string]any
	locality           *corev3.Locality
}

func (n nodeSpec) node() *corev3.Node {
	if n.kind == "" {
		n.kind = "sidecar"
	}
	if n.ns == "" {
		n.ns = "default"
	}
	if n.ip == "" {
		n.ip = "10.0.0.1"
	}
	meta, err := structpb.NewStruct(map[string]any{"NAMESPACE": n.ns, "LABELS": n.labels})
	if err != nil {
		panic(err)
	}
	return &corev3.Node{Id: n.kind + "~" + n.ip + "~" + n.name + "." + n.ns + "~" + n.ns + ".svc.cluster.local",
		Metadata: meta, Locality: n.locality}
}

func seedSharing(s model.Store) {
	upsertService(s, "a", nil, nil)
	setHTTPEndpoints(s, "a", "10.8.0.1")
	upsertService(s, "private", model.ExportTo{"default"}, nil)
	setHTTPEndpoints(s, "private", "10.8.0.2")
}

// subscribeAll subscribes to the four types, ACKs, and returns what came.
func subscribeAll(c *sotwClient) map[string][]*anypb.Any {
	got := map[string][]*anypb.Any{}
	for _, sub := range []struct {
		typeURL string
		names   []string
	}{{ClusterType, nil}, {ListenerType, nil}, {RouteType, []string{"80"}}, {EndpointType, []string{hostname("a"), hostname("private")}}} {
		r := c.subscribe(sub.typeURL, sub.names...)
		c.ack(r, sub.names...)
		got[shortType(sub.typeURL)] = r.GetResources()
	}
	return got
}

func TestIdenticalProxiesShareGenerations(t *testing.T) {
	set, counts := countingSet()
	h := newHarness(t, harnessConfig{noStoreHandler: true, generators: set, seed: seedSharing})
	locality := &corev3.Locality{Region: "eu", Zone: "eu-1"}

	const proxies = 50
	clients := make([]*sotwClient, proxies)
	var first map[string][]*anypb.Any
	for i := range clients {
		// Their labels differ, which does not matter: no rule in the
		// namespace selects workloads.
		name := fmt.Sprintf("twin-%d", i)
		clients[i] = h.sotwAs(name, nodeSpec{name: name, labels: map[string]any{"app": name}, locality: locality}.node())
		got := subscribeAll(clients[i])
		if first == nil {
			first = got
			continue
		}
		for typ, list := range got {
			if !sameAnys(list, first[typ]) {
				t.Fatalf("twin-%d got different %s resources than twin-0", i, typ)
			}
		}
	}
	expectCounts := func(what string, full, partial map[string]int64) {
		t.Helper()
		for typ, g := range counts {
			if g.full.Load() != full[typ] || g.partial.Load() != partial[typ] {
				t.Errorf("%s: %s generated %d times in full and %d partially, want %d and %d",
					what, typ, g.full.Load(), g.partial.Load(), full[typ], partial[typ])
			}
		}
	}
	once := map[string]int64{"cds": 1, "lds": 1, "rds": 1, "eds": 1}
	expectCounts("after 50 identical subscriptions", once, nil)

	// A push regenerates once per type for all of them.
	h.pushNow(&model.PushRequest{Full: true, Start: time.Now()})
	for i, c := range clients {
		if got := len(c.barrier()); got != 4 {
			t.Fatalf("twin-%d received %d responses after a forced push, want 4", i, got)
		}
	}
	twice := map[string]int64{"cds": 2, "lds": 2, "rds": 2, "eds": 2}
	expectCounts("after a forced push", twice, nil)

	// An endpoint push shares its partial EDS result too.
	setHTTPEndpoints(h.store, "a", "10.8.0.9")
	h.pushNow(model.NewPushRequest(model.ConfigKey{Kind: model.KindEndpoints, Namespace: "default", Name: "a"}, time.Now()))
	for i, c := range clients {
		if got := c.barrier(); len(got) != 1 || got[0].GetTypeUrl() != EndpointType {
			t.Fatalf("twin-%d received %d responses after an endpoint push, want 1 EDS", i, len(got))
		}
	}
	expectCounts("after an endpoint push", twice, map[string]int64{"eds": 1})
}

func TestDifferentProxiesDoNotShare(t *testing.T) {
	base := nodeSpec{name: "base", ip: "10.7.0.1", labels: map[string]any{"app": "web"}}
	selectorRule := func(s model.Store) {
		s.UpsertConfig(&model.Config{Kind: model.KindDestinationRule, Namespace: "default", Name: "web-only",
			CreationTime: ruleCreated, Spec: &networking.DestinationRule{
				Host:             hostname("a"),
				WorkloadSelector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "web"}},
			}})
	}
	pods := func(s model.Store) {
		for i, app := range []string{"web", "web", "db"} {
			s.UpsertWorkload(&model.Workload{Name: fmt.Sprintf("pod-%d", i), Namespace: "default",
				IPs: []string{fmt.Sprintf("10.7.0.%d", i+1)}, Labels: map[string]string{"app": app}})
		}
		for _, app := range []string{"web", "db"} {
			s.UpsertService(&model.Service{Name: app, Namespace: "default", Hostname: hostname(app),
				Selector: map[string]string{"app": app},
				Ports:    []*model.Port{{Name: "http", Port: 80, Protocol: model.ProtocolHTTP, TargetPort: 8080}}})
		}
	}
	with := func(f func(*nodeSpec)) nodeSpec {
		n := base
		n.name = "variant"
		n.labels = maps.Clone(base.labels)
		f(&n)
		return n
	}
	router := func(istioLabel string) nodeSpec {
		return nodeSpec{kind: "router", name: istioLabel, ns: "istio-system", ip: "10.7.9.9", labels: map[string]any{"istio": istioLabel}}
	}
	ingressGateway, egressGateway := router("ingressgateway"), router("egressgateway")
	cases := []struct {
		name    string
		seed    func(model.Store)
		from    *nodeSpec // base unless set
		variant nodeSpec
		shared  bool
	}{
		{"identical but for the name", nil, nil, with(func(*nodeSpec) {}), true},
		{"other labels, no workload-selector rule", nil, nil, with(func(n *nodeSpec) { n.labels["app"] = "db" }), true},
		{"other labels under a workload-selector rule", selectorRule, nil, with(func(n *nodeSpec) { n.labels["app"] = "db" }), false},
		{"same labels under a workload-selector rule", selectorRule, nil, with(func(*nodeSpec) {}), true},
		{"other namespace", nil, nil, with(func(n *nodeSpec) { n.ns = "other" }), false},
		{"other locality", nil, nil, with(func(n *nodeSpec) { n.locality = &corev3.Locality{Region: "us", Zone: "us-2"} }), false},
		{"router", nil, nil, with(func(n *nodeSpec) { n.kind = "router" }), false},
		{"another pod of the same service", pods, nil, with(func(n *nodeSpec) { n.ip = "10.7.0.2" }), true},
		{"a pod of another service", pods, nil, with(func(n *nodeSpec) { n.ip = "10.7.0.3" }), false},
		// Only the ingress gateway is served the Ingresses.
		{"the ingress gateway and another router", nil, &egressGateway, ingressGateway, false},
		{"two ingress gateway replicas", nil, &ingressGateway, with(func(n *nodeSpec) { *n = ingressGateway; n.name = "replica" }), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			set, counts := countingSet()
			h := newHarness(t, harnessConfig{noStoreHandler: true, generators: set, seed: func(s model.Store) {
				seedSharing(s)
				if tc.seed != nil {
					tc.seed(s)
				}
			}})
			from := base
			if tc.from != nil {
				from = *tc.from
			}
			h.sotwAs("base", from.node()).subscribe(ClusterType)
			h.sotwAs("variant", tc.variant.node()).subscribe(ClusterType)
			want := int64(2)
			if tc.shared {
				want = 1
			}
			if got := counts["cds"].full.Load(); got != want {
				t.Fatalf("CDS generated %d times for the two proxies, want %d", got, want)
			}
		})
	}
}

// The shared generations of one served version are bounded and dropped with
// it; a subscription that collides with another's key is not shared.
func TestSharedGenerationsBounds(t *testing.T) {
	sg := newSharedGenerations()
	key := shareKey{typeURL: ClusterType, identity: "x", names: 1}
	r, leader := sg.claim(key, []string{"a"}, nil)
	if r == nil || !leader {
		t.Fatal("first claim did not lead")
	}
	sg.finish(r, newGeneration(make([]generated, 3)), nil)
	if again, leader := sg.claim(key, []string{"a"}, nil); again != r || leader {
		t.Fatal("second claim did not share the first result")
	}
	if other, _ := sg.claim(key, []string{"b"}, nil); other != nil {
		t.Fatal("a colliding subscription shared another's result")
	}
	// A shared subscription matches by pointer, and an equal list of
	// names still matches it.
	var lists nameLists
	ab := internNames(&lists, "a", "b")
	lkey := shareKey{typeURL: EndpointType, identity: "x", names: ab.hash}
	lr, leader := sg.claim(lkey, nil, ab)
	if lr == nil || !leader || !slices.Equal(lr.names, []string{"a", "b"}) {
		t.Fatalf("first claim of a shared list: %v, leader %v", lr, leader)
	}
	if again, leader := sg.claim(lkey, nil, ab); again != lr || leader {
		t.Fatal("a second claim of the same shared list did not share")
	}
	if again, leader := sg.claim(lkey, []string{"a", "b"}, nil); again != lr || leader {
		t.Fatal("an equal list of names did not share the shared list's result")
	}
	if other, _ := sg.claim(lkey, []string{"a", "c"}, nil); other != nil {
		t.Fatal("a colliding subscription shared a shared list's result")
	}
	sg.resources = maxSharedResources
	if over, _ := sg.claim(shareKey{typeURL: ClusterType, identity: "y"}, nil, nil); over != nil {
		t.Fatal("claim past the resource bound was accepted")
	}
}

func sameAnys(a, b []*anypb.Any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
