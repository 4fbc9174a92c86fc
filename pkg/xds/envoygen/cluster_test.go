package envoygen

import (
	"bytes"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	proxyprotocolv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/proxy_protocol/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

func TestHashPolicy(t *testing.T) {
	ttl := durationpb.New(time.Hour)
	tests := []struct {
		name string
		lb   *networking.LoadBalancerSettings
		want []*route.RouteAction_HashPolicy
	}{
		{name: "no load balancer"},
		{
			name: "simple",
			lb:   &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_RANDOM}},
		},
		{
			name: "header",
			lb:   consistentHash(&networking.LoadBalancerSettings_ConsistentHashLB{HashKey: &networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName{HttpHeaderName: "x-user"}}),
			want: []*route.RouteAction_HashPolicy{{PolicySpecifier: &route.RouteAction_HashPolicy_Header_{
				Header: &route.RouteAction_HashPolicy_Header{HeaderName: "x-user"},
			}}},
		},
		{
			name: "cookie",
			lb: consistentHash(&networking.LoadBalancerSettings_ConsistentHashLB{HashKey: &networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie{
				HttpCookie: &networking.LoadBalancerSettings_ConsistentHashLB_HTTPCookie{
					Name: "session", Path: "/", Ttl: ttl,
					Attributes: []*networking.LoadBalancerSettings_ConsistentHashLB_HTTPCookie_Attribute{{Name: "SameSite", Value: "Strict"}},
				},
			}}),
			want: []*route.RouteAction_HashPolicy{{PolicySpecifier: &route.RouteAction_HashPolicy_Cookie_{
				Cookie: &route.RouteAction_HashPolicy_Cookie{
					Name: "session", Path: "/", Ttl: durationpb.New(time.Hour),
					Attributes: []*route.RouteAction_HashPolicy_CookieAttribute{{Name: "SameSite", Value: "Strict"}},
				},
			}}},
		},
		{
			name: "source ip",
			lb:   consistentHash(&networking.LoadBalancerSettings_ConsistentHashLB{HashKey: &networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp{UseSourceIp: true}}),
			want: []*route.RouteAction_HashPolicy{{PolicySpecifier: &route.RouteAction_HashPolicy_ConnectionProperties_{
				ConnectionProperties: &route.RouteAction_HashPolicy_ConnectionProperties{SourceIp: true},
			}}},
		},
		{
			name: "query parameter",
			lb:   consistentHash(&networking.LoadBalancerSettings_ConsistentHashLB{HashKey: &networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName{HttpQueryParameterName: "user"}}),
			want: []*route.RouteAction_HashPolicy{{PolicySpecifier: &route.RouteAction_HashPolicy_QueryParameter_{
				QueryParameter: &route.RouteAction_HashPolicy_QueryParameter{Name: "user"},
			}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := HashPolicy(tt.lb)
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("HashPolicy (-want +got):\n%s", diff)
			}
			for _, p := range got {
				if err := xdstest.ValidateDeep(p); err != nil {
					t.Errorf("invalid hash policy: %v", err)
				}
			}
		})
	}
}

func consistentHash(ch *networking.LoadBalancerSettings_ConsistentHashLB) *networking.LoadBalancerSettings {
	return &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_ConsistentHash{ConsistentHash: ch}}
}

func TestLocalityMatches(t *testing.T) {
	loc := model.Locality{Region: "us", Zone: "us-1", SubZone: "r1"}
	tests := []struct {
		pattern string
		want    bool
	}{
		{"us", true}, {"us/*", true}, {"us/us-1", true}, {"us/us-1/r1", true}, {"*", true},
		{"us/us-2", false}, {"eu", false}, {"us/us-1/r2", false}, {"*/us-1/*", true},
	}
	for _, tt := range tests {
		if got := localityMatches(loc, tt.pattern); got != tt.want {
			t.Errorf("localityMatches(%q) = %v, want %v", tt.pattern, got, tt.want)
		}
	}
}

// sharedFixture is one service with a rule Envoy cannot fully honour.
const sharedFixture = `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: app}
spec:
  clusterIP: 10.96.0.20
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: app, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [10.1.0.1]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web, namespace: app}
spec:
  host: web.app.svc.cluster.local
  trafficPolicy:
    loadBalancer:
      backendUtilization: {}
`

func buildPush(t testing.TB, store model.Store, prev *pushcontext.PushContext, req *model.PushRequest) *pushcontext.PushContext {
	t.Helper()
	return pushcontext.Build(store, pushcontext.Options{}, prev, req)
}

func findResource(res model.Resources, name string) *model.Resource {
	for i := range res {
		if res[i].Name == name {
			return &res[i]
		}
	}
	return nil
}

// Proxies that resolve the same rule share one marshalled cluster, whatever
// their namespace; a dropped field is reported once per push context and
// logged once, and reported again to the next push context that reuses the
// cached cluster.
func TestClusterSharingAndProblems(t *testing.T) {
	store := xdstest.Store(t, sharedFixture)
	var logs bytes.Buffer
	g := NewClusterGenerator(Options{Logger: testLogger(&logs)})
	push := buildPush(t, store, nil, nil)
	w := &model.WatchedResource{TypeURL: ClusterType, Wildcard: true}
	const name = "outbound|80||web.app.svc.cluster.local"

	var first *model.Resource
	for _, ns := range []string{"app", "app", "other", "third"} {
		res, err := g.Generate(&model.Proxy{Type: model.SidecarProxy, Namespace: ns}, push, w, &model.PushRequest{Full: true})
		if err != nil {
			t.Fatal(err)
		}
		r := findResource(res, name)
		if r == nil {
			t.Fatalf("namespace %s: no %s", ns, name)
		}
		if first == nil {
			first = r
		} else if r.Resource != first.Resource {
			t.Errorf("namespace %s: cluster was built again instead of shared", ns)
		}
	}
	if got := push.ProblemCount(); got != 1 {
		t.Errorf("problems = %d, want 1", got)
	}
	if got := strings.Count(logs.String(), "backendUtilization"); got != 1 {
		t.Errorf("logged %d times, want once:\n%s", got, logs.String())
	}

	// A push that changes nothing the cluster depends on reuses it, and
	// the new push context still learns about the dropped field.
	next := buildPush(t, store, push, &model.PushRequest{Full: true, ConfigsUpdated: map[model.ConfigKey]struct{}{
		{Kind: model.KindNamespace, Name: "other"}: {},
	}})
	res, err := g.Generate(&model.Proxy{Type: model.SidecarProxy, Namespace: "app"}, next, w, &model.PushRequest{Full: true})
	if err != nil {
		t.Fatal(err)
	}
	if r := findResource(res, name); r == nil || r.Resource != first.Resource {
		t.Errorf("cluster not reused across push contexts")
	}
	if got := next.ProblemCount(); got != 1 {
		t.Errorf("next push context problems = %d, want 1", got)
	}
}

// An endpoint-only push returns just the changed services' assignments;
// explicit requests for clusters that do not exist for the proxy get
// nothing.
func TestEndpointPartialAndUnknown(t *testing.T) {
	store := xdstest.Store(t, sharedFixture+`
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: app}
spec:
  clusterIP: 10.96.0.21
  ports: [{name: http, port: 80, targetPort: 8080}]
`)
	g := NewEndpointGenerator(Options{})
	push := buildPush(t, store, nil, nil)
	proxy := &model.Proxy{Type: model.SidecarProxy, Namespace: "app"}
	w := &model.WatchedResource{TypeURL: EndpointType, ResourceNames: []string{
		"outbound|80|nosuchsubset|web.app.svc.cluster.local",
		"outbound|80||api.app.svc.cluster.local",
		"outbound|80||missing.app.svc.cluster.local",
		"outbound|80||web.app.svc.cluster.local",
		"outbound|81||web.app.svc.cluster.local",
	}}
	res, err := g.Generate(proxy, push, w, &model.PushRequest{Full: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resourceNames(res), []string{"outbound|80||api.app.svc.cluster.local", "outbound|80||web.app.svc.cluster.local"}; !cmp.Equal(got, want) {
		t.Errorf("full push names = %v, want %v", got, want)
	}
	partial := &model.PushRequest{ConfigsUpdated: map[model.ConfigKey]struct{}{{Kind: model.KindEndpoints, Namespace: "app", Name: "web"}: {}}}
	res, err = g.Generate(proxy, push, w, partial)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resourceNames(res), []string{"outbound|80||web.app.svc.cluster.local"}; !cmp.Equal(got, want) {
		t.Errorf("endpoint push names = %v, want %v", got, want)
	}
}

func resourceNames(res model.Resources) []string {
	out := make([]string, 0, len(res))
	for _, r := range res {
		out = append(out, r.Name)
	}
	return out
}

// Clusters of services without a rule are spliced from a template; they
// must decode to exactly the cluster the builder makes, with auto mTLS's
// transport socket matches or without.
func TestClusterTemplateMatchesBuilder(t *testing.T) {
	var templates clusterTemplates
	protocols := []model.Protocol{model.ProtocolHTTP, model.ProtocolHTTP2, model.ProtocolGRPC, model.ProtocolTCP, model.ProtocolUnknown, model.ProtocolTLS}
	peers := map[string]peerTLS{
		"no auto mTLS":                   {},
		"auto mTLS, no identities known": {auto: true},
		"auto mTLS with the identities":  {auto: true, identities: pushcontext.NewWorkloadIdentities("spiffe://cluster.local/ns/app/sa/web", "spiffe://cluster.local/ns/app/sa/web-v2")},
	}
	for _, proxyType := range []model.NodeType{model.SidecarProxy, model.Router} {
		for _, protocol := range protocols {
			for peerName, peer := range peers {
				o := outboundCluster{
					svc:       &model.Service{Hostname: "web.app.svc.cluster.local"},
					port:      &model.Port{Port: 8080, Protocol: protocol},
					proxyType: proxyType,
					peer:      peer,
				}
				want := buildOutboundCluster(o, problemReporter{})
				if peer.auto != (len(want.TransportSocketMatches) == 1) {
					t.Errorf("%s %s %s: %d transport socket matches", proxyType, protocol, peerName, len(want.TransportSocketMatches))
				}
				res := templates.get(protocol, proxyType).resource(o)
				var got cluster.Cluster
				if err := res.Resource.UnmarshalTo(&got); err != nil {
					t.Fatalf("%s %s %s: %v", proxyType, protocol, peerName, err)
				}
				if diff := cmp.Diff(want, &got, protocmp.Transform()); diff != "" {
					t.Errorf("%s %s %s: spliced cluster differs (-built +spliced):\n%s", proxyType, protocol, peerName, diff)
				}
			}
		}
	}
}

// Many connections generate from one push context at once; every one must
// get the same clusters and assignments as a lone generation.
func TestClusterConcurrentGeneration(t *testing.T) {
	f := loadFixture(t, "testdata/clusters/locality-failover.in.yaml")
	push := buildPush(t, f.store, nil, nil)
	proxy := f.proxies[0].model()
	cw := &model.WatchedResource{TypeURL: ClusterType, Wildcard: true}
	ew := &model.WatchedResource{TypeURL: EndpointType, Wildcard: true}
	full := &model.PushRequest{Full: true}
	wantC, _ := NewClusterGenerator(Options{}).Generate(proxy, push, cw, full)
	wantE, _ := NewEndpointGenerator(Options{}).Generate(proxy, push, ew, full)
	cds, eds := NewClusterGenerator(Options{}), NewEndpointGenerator(Options{})
	errs := make(chan string, 16)
	done := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 20 {
				c, err1 := cds.Generate(proxy, push, cw, full)
				e, err2 := eds.Generate(proxy, push, ew, full)
				if err1 != nil || err2 != nil {
					errs <- "generate failed"
					return
				}
				if !cmp.Equal(wantC, c, cmp.Comparer(proto.Equal)) || !cmp.Equal(wantE, e, cmp.Comparer(proto.Equal)) {
					errs <- "concurrent generation differs"
					return
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// A rule's proxyProtocol wraps the transport socket of the auto mTLS match
// and the cluster's own, which the plaintext endpoints use; and doing so
// must leave other clusters' matches, which share parts with it, as they
// were.
func TestProxyProtocolWrapsAutoMTLSMatches(t *testing.T) {
	rule := &pushcontext.DestinationRule{Spec: &networking.DestinationRule{
		Host:          "web.app.svc.cluster.local",
		TrafficPolicy: &networking.TrafficPolicy{ProxyProtocol: &networking.TrafficPolicy_ProxyProtocol{}},
	}}
	o := outboundCluster{
		svc:  &model.Service{Hostname: "web.app.svc.cluster.local"},
		port: &model.Port{Port: 8080, Protocol: model.ProtocolHTTP}, proxyType: model.SidecarProxy,
		rule: rule, peer: peerTLS{auto: true},
	}
	const wrapper = "envoy.transport_sockets.upstream_proxy_protocol"
	c := buildOutboundCluster(o, problemReporter{})
	if len(c.TransportSocketMatches) != 1 {
		t.Fatalf("%d transport socket matches, want 1", len(c.TransportSocketMatches))
	}
	if got := c.TransportSocketMatches[0].GetTransportSocket().GetName(); got != wrapper {
		t.Errorf("mutual TLS match: transport socket %s, want the proxy protocol wrapper", got)
	}
	var around proxyprotocolv3.ProxyProtocolUpstreamTransport
	if got := c.GetTransportSocket().GetName(); got != wrapper {
		t.Errorf("the cluster's transport socket, which plaintext endpoints use, is %q, want the proxy protocol wrapper", got)
	} else if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(&around); err != nil {
		t.Fatal(err)
	} else if got := around.GetTransportSocket().GetName(); got != transportSocketRaw {
		t.Errorf("the wrapper around the plaintext endpoints' socket holds %q, want %s", got, transportSocketRaw)
	}
	plain := buildOutboundCluster(outboundCluster{svc: o.svc, port: o.port, proxyType: o.proxyType, peer: o.peer}, problemReporter{})
	if got := plain.TransportSocketMatches[0].GetTransportSocket().GetName(); got != transportSocketTLS {
		t.Errorf("another cluster's mutual TLS match now uses %s: the shared entry was modified", got)
	}
	if plain.TransportSocket != nil {
		t.Errorf("another cluster got a transport socket of its own: %v", plain.TransportSocket)
	}
}

// An original-destination cluster's mutual TLS follows the service's
// endpoints, which the endpoint fast path changes without a new push
// context version: the cluster cache must tell the two apart, and the
// other clusters of the rule's service must keep their cache entries.
func TestOriginalDstMTLSFollowsEndpoints(t *testing.T) {
	store := xdstest.Store(t, `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: app}
spec:
  mtls: {mode: STRICT}
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: app, labels: {app: web, security.istio.io/tlsMode: istio}}
spec: {serviceAccountName: web, containers: [{name: app, image: app}]}
status: {phase: Running, podIP: 10.1.0.1, podIPs: [{ip: 10.1.0.1}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: app}
spec:
  clusterIP: 10.96.0.20
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: app, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
  - {addresses: [10.1.0.1], targetRef: {kind: Pod, name: web-0, namespace: app}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web, namespace: app}
spec:
  host: web.app.svc.cluster.local
  subsets:
  - name: direct
    labels: {app: web}
    trafficPolicy:
      loadBalancer: {simple: PASSTHROUGH}
`)
	g := NewClusterGenerator(Options{})
	push := buildPush(t, store, nil, nil)
	proxy := &model.Proxy{Type: model.SidecarProxy, Namespace: "app"}
	w := &model.WatchedResource{TypeURL: ClusterType, Wildcard: true}
	const direct, plain = "outbound|80|direct|web.app.svc.cluster.local", "outbound|80||web.app.svc.cluster.local"
	generate := func() (orig *cluster.Cluster, eds model.Resource) {
		t.Helper()
		res, err := g.Generate(proxy, push, w, &model.PushRequest{Full: true})
		if err != nil {
			t.Fatal(err)
		}
		r, e := findResource(res, direct), findResource(res, plain)
		if r == nil || e == nil {
			t.Fatalf("clusters %v, want %s and %s", resourceNames(res), direct, plain)
		}
		var c cluster.Cluster
		if err := r.Resource.UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		if c.GetType() != cluster.Cluster_ORIGINAL_DST {
			t.Fatalf("%s is %s, want ORIGINAL_DST", direct, c.GetType())
		}
		return &c, *e
	}
	c, eds := generate()
	if got := c.GetTransportSocket().GetName(); got != transportSocketTLS || len(c.GetTransportSocketMatches()) > 0 {
		t.Fatalf("every endpoint has a sidecar: transport socket %q and %d matches, want mutual TLS for the whole cluster",
			got, len(c.GetTransportSocketMatches()))
	}

	// A workload without a sidecar joins, through the fast path.
	svc := model.NamespacedName{Namespace: "app", Name: "web"}
	store.SetEndpoints(svc, "web-2", []*model.Endpoint{{Address: "10.1.0.2", Port: 8080, ServicePortName: "http",
		Namespace: "app", Labels: map[string]string{"app": "web"}}})
	if update := push.UpdateEndpoints(store, []model.NamespacedName{svc}); len(update.MTLSChanged) != 1 {
		t.Fatalf("update %+v, want web's mutual TLS changed", update)
	}
	c, eds2 := generate()
	if ts := c.GetTransportSocket(); ts != nil {
		t.Errorf("an endpoint without a sidecar: the cluster still sends %s", ts.GetName())
	}
	if eds2.Resource != eds.Resource {
		t.Errorf("%s was built again: its cache entry must not depend on the endpoints", plain)
	}
}
