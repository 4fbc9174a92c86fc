package envoygen

import (
	"bytes"
	"slices"
	"strings"
	"sync"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// TestGatewayChains feeds TLS hosts that overlap, which the index should
// never produce, straight to the chain builder: Envoy rejects a listener
// whose chains match the same SNI name, so each name must end up in one
// chain only, the earliest, and the loser must hear why.
func TestGatewayChains(t *testing.T) {
	ing := func(name string) model.NamespacedName { return model.NamespacedName{Namespace: "app", Name: name} }
	tlsHost := func(from, secret string, hosts ...string) *pushcontext.IngressTLSHost {
		return &pushcontext.IngressTLSHost{Hosts: hosts, Secret: ing(secret),
			SecretName: pushcontext.IngressSecretName("app", secret), From: ing(from)}
	}
	type chain struct {
		names  []string
		route  string
		secret string
	}
	tests := []struct {
		desc     string
		gw       *pushcontext.IngressGateway
		want     []chain
		problems []string
	}{
		{
			desc: "distinct hosts",
			gw: &pushcontext.IngressGateway{HTTPPort: 8080, HTTPSPort: 8443, TLS: []*pushcontext.IngressTLSHost{
				tlsHost("a", "a-cert", "a.example.com"), tlsHost("b", "b-cert", "b.example.com", "c.example.com")}},
			want: []chain{
				{[]string{"a.example.com"}, "https.8443.a.example.com", "kubernetes://app/a-cert"},
				{[]string{"b.example.com", "c.example.com"}, "https.8443.b.example.com", "kubernetes://app/b-cert"},
			},
		},
		{
			desc: "a host served twice stays with the first",
			gw: &pushcontext.IngressGateway{HTTPPort: 8080, HTTPSPort: 8443, TLS: []*pushcontext.IngressTLSHost{
				tlsHost("a", "a-cert", "a.example.com"), tlsHost("b", "b-cert", "A.example.com", "b.example.com"),
				tlsHost("c", "c-cert", "b.example.com")}},
			want: []chain{
				{[]string{"a.example.com"}, "https.8443.a.example.com", "kubernetes://app/a-cert"},
				{[]string{"b.example.com"}, "https.8443.b.example.com", "kubernetes://app/b-cert"},
			},
			problems: []string{
				`Ingress/app/b: TLS host "a.example.com" with secret app/b-cert dropped: Ingress app/a already serves it with secret app/a-cert`,
				`Ingress/app/c: TLS host "b.example.com" with secret app/c-cert dropped: Ingress app/b already serves it with secret app/b-cert`,
			},
		},
		{
			desc: "one chain for any host",
			gw: &pushcontext.IngressGateway{HTTPPort: 8080, HTTPSPort: 8443, TLS: []*pushcontext.IngressTLSHost{
				tlsHost("a", "a-cert", "*"), tlsHost("b", "b-cert", "*"), tlsHost("c", "c-cert", "c.example.com")}},
			want: []chain{
				{nil, "https.8443.*", "kubernetes://app/a-cert"},
				{[]string{"c.example.com"}, "https.8443.c.example.com", "kubernetes://app/c-cert"},
			},
			problems: []string{"Ingress/app/b: TLS for any host with secret app/b-cert dropped: Ingress app/a already serves TLS for any host"},
		},
		{
			desc: "no HTTPS port",
			gw: &pushcontext.IngressGateway{HTTPPort: 8080, TLS: []*pushcontext.IngressTLSHost{
				tlsHost("a", "a-cert", "a.example.com")}},
		},
		{
			desc: "HTTPS port taken by HTTP",
			gw: &pushcontext.IngressGateway{HTTPPort: 8080, HTTPSPort: 8080, TLS: []*pushcontext.IngressTLSHost{
				tlsHost("a", "a-cert", "a.example.com")}},
			problems: []string{"Ingress/app/a: TLS for a.example.com dropped: the gateway's HTTPS port 8080 is also its HTTP port"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			var problems []string
			chains := gatewayChains(tt.gw, func(k model.ConfigKey, reason string) {
				problems = append(problems, k.String()+": "+reason)
			})
			var got []chain
			for _, c := range chains {
				got = append(got, chain{c.serverNames, c.routeName, c.secretName})
			}
			if !slices.EqualFunc(got, tt.want, func(a, b chain) bool {
				return slices.Equal(a.names, b.names) && a.route == b.route && a.secret == b.secret
			}) {
				t.Errorf("chains %+v, want %+v", got, tt.want)
			}
			if !slices.Equal(problems, tt.problems) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(tt.problems, "\n"))
			}
		})
	}
}

func TestChainServes(t *testing.T) {
	tests := []struct {
		names []string
		host  string
		want  bool
	}{
		{[]string{"a.example.com"}, "a.example.com", true},
		{[]string{"a.example.com"}, "A.Example.com", true},
		{[]string{"a.example.com"}, "b.example.com", false},
		{[]string{"*.example.com"}, "a.example.com", true},
		{[]string{"*.example.com"}, "example.com", false},
		{[]string{"*.example.com"}, "a.b.example.com", true},
		{[]string{"a.example.com"}, "*.example.com", true}, // the wildcard host routes a.example.com
		{[]string{"a.example.com"}, "*.other.com", false},
		{[]string{"a.example.com"}, anyHost, true},
		{nil, "anything.example.com", true},
	}
	for _, tt := range tests {
		c := gatewayChain{serverNames: tt.names}
		if got := c.serves(tt.host); got != tt.want {
			t.Errorf("chain %v serves %q = %v, want %v", tt.names, tt.host, got, tt.want)
		}
		// The index the route build uses agrees, among other hosts.
		idx := newVhostIndex([]*pushcontext.IngressVirtualHost{{Host: "unrelated.test"}, {Host: tt.host}, {Host: "*.unrelated.test"}})
		if got := slices.Contains(idx.servedBy(&c), 1); got != tt.want {
			t.Errorf("index: chain %v serves %q = %v, want %v", tt.names, tt.host, got, tt.want)
		}
	}
}

// gatewayWorld is a gateway Service, an Ingress with TLS, and its Secret.
const gatewayWorld = `
apiVersion: v1
kind: Service
metadata: {name: istio-ingressgateway, namespace: istio-system}
spec:
  clusterIP: 10.96.0.100
  ports:
  - {name: http2, port: 80, targetPort: 8080}
  - {name: https, port: 443, targetPort: 8443}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: app}
spec:
  clusterIP: 10.96.10.1
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: istio}
spec: {controller: istio.io/ingress-controller}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: app}
spec:
  ingressClassName: istio
  tls: [{hosts: [web.example.com], secretName: web-cert}]
  rules:
  - host: web.example.com
    http:
      paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]
`

// gatewayProxy is a router in istio-system that proved its identity, as
// on 15012.
func gatewayProxy(labels map[string]string) *model.Proxy {
	return &model.Proxy{ID: "router~10.1.0.50~gw.istio-system~istio-system.svc.cluster.local", Type: model.Router,
		IPAddresses: []string{"10.1.0.50"}, Namespace: "istio-system", Labels: labels,
		VerifiedIdentity: verified("istio-system", "istio-ingressgateway")}
}

func verified(ns, sa string) *model.Identity {
	return &model.Identity{TrustDomain: "cluster.local", Namespace: ns, ServiceAccount: sa}
}

var ingressGatewayLabels = map[string]string{"istio": "ingressgateway", "app": "istio-ingressgateway"}

// TestGatewayRouteNames: Envoy may ask for route names the gateway does
// not have (a listener it still holds from before a push); each gets an
// empty configuration rather than none, so nothing waits on it. A wildcard
// subscription gets every configuration.
func TestGatewayRouteNames(t *testing.T) {
	store := xdstest.Store(t, gatewayWorld)
	pem := selfSignedPEM(t, []string{"web.example.com"})
	store.UpsertSecret(&model.Secret{Name: "web-cert", Namespace: "app", Cert: pem.cert, PrivateKey: pem.key})
	push := pushcontext.Build(store, gatewayTestPushOptions(), nil, nil)
	rds := NewRouteGenerator(Options{})
	tests := []struct {
		desc      string
		w         *model.WatchedResource
		want      []string
		wantEmpty []string
	}{
		{"explicit names, one unknown", &model.WatchedResource{TypeURL: RouteType,
			ResourceNames: []string{"http.8080", "https.8443.gone.example.com"}},
			[]string{"http.8080", "https.8443.gone.example.com"}, []string{"https.8443.gone.example.com"}},
		{"wildcard", &model.WatchedResource{TypeURL: RouteType, Wildcard: true},
			[]string{"http.8080", "https.8443.web.example.com"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			res, err := rds.Generate(gatewayProxy(ingressGatewayLabels), push, tt.w, &model.PushRequest{Full: true})
			if err != nil {
				t.Fatal(err)
			}
			var names, empty []string
			for _, r := range res {
				names = append(names, r.Name)
				rc := &route.RouteConfiguration{}
				if err := r.Resource.UnmarshalTo(rc); err != nil {
					t.Fatal(err)
				}
				if rc.GetName() != r.Name {
					t.Errorf("%s carries name %s", r.Name, rc.GetName())
				}
				if len(rc.GetVirtualHosts()) == 0 {
					empty = append(empty, r.Name)
				}
				if err := xdstest.ValidateDeep(rc); err != nil {
					t.Errorf("%s: %v", r.Name, err)
				}
			}
			if !slices.Equal(names, tt.want) || !slices.Equal(empty, tt.wantEmpty) {
				t.Errorf("got %v (empty %v), want %v (empty %v)", names, empty, tt.want, tt.wantEmpty)
			}
		})
	}
}

// TestGatewayVhostEncoderMatchesProto: the hand-written wire encoding of a
// gateway virtual host is byte for byte what the protobuf library makes of
// the message it stands for, for every kind of match.
func TestGatewayVhostEncoderMatchesProto(t *testing.T) {
	g := newRouteGenerator(Options{})
	from := model.NamespacedName{Namespace: "app", Name: "web"}
	routeTo := func(pathType model.PathType, path string) *pushcontext.IngressRoute {
		return &pushcontext.IngressRoute{PathType: pathType, Path: path, Cluster: "outbound|8080||web.app.svc.cluster.local",
			Host: "web.app.svc.cluster.local", Port: 8080, From: from}
	}
	vh := &pushcontext.IngressVirtualHost{Host: "web.example.com", Routes: []*pushcontext.IngressRoute{
		routeTo(model.PathTypeExact, "/healthz"),
		routeTo(model.PathTypePrefix, "/api/"),
		routeTo(model.PathTypePrefix, "/"),
	}}
	p := g.parts
	action := func(r *pushcontext.IngressRoute) *route.Route_Route {
		return &route.Route_Route{Route: &route.RouteAction{
			ClusterSpecifier:  &route.RouteAction_Cluster{Cluster: r.Cluster},
			Timeout:           p.noTimeout,
			RetryPolicy:       p.defaultRetry,
			MaxStreamDuration: p.outboundStreamMax,
		}}
	}
	matches := []*route.RouteMatch{
		{PathSpecifier: &route.RouteMatch_Path{Path: "/healthz"}},
		{PathSpecifier: &route.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: "/api"}},
		{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
	}
	want := &route.VirtualHost{Name: "web.example.com", Domains: []string{"web.example.com"}, IncludeRequestAttemptCount: true}
	for i, r := range vh.Routes {
		want.Routes = append(want.Routes, &route.Route{
			Name:      "app/web",
			Match:     matches[i],
			Action:    action(r),
			Decorator: &route.Decorator{Operation: "web.app.svc.cluster.local:8080/*"},
		})
	}
	wantBytes, err := lrMarshal.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	b := gatewayRouteBuild{g: g}
	got := b.virtualHost(vh)
	if !bytes.Equal(got, wantBytes) {
		decoded := &route.VirtualHost{}
		err := proto.Unmarshal(got, decoded)
		t.Fatalf("encoded virtual host differs from proto.Marshal (decodes: %v)\n got %v\nwant %v", err, decoded, want)
	}
	if err := xdstest.ValidateDeep(want); err != nil {
		t.Fatal(err)
	}
}

// TestGatewayConcurrentGenerate: replicas on two push contexts generate at
// once; the caches shared across push contexts must neither race (run
// with -race) nor mix one push's configuration into another's.
func TestGatewayConcurrentGenerate(t *testing.T) {
	store := xdstest.Store(t, gatewayWorld)
	pem := selfSignedPEM(t, []string{"web.example.com"})
	store.UpsertSecret(&model.Secret{Name: "web-cert", Namespace: "app", Cert: pem.cert, PrivateKey: pem.key})
	first := pushcontext.Build(store, gatewayTestPushOptions(), nil, nil)
	ing := *store.Ingress(model.NamespacedName{Namespace: "app", Name: "web"})
	ing.Revision += "-2"
	ing.Rules = []model.IngressRule{{Host: "web.example.com", Paths: []model.IngressPath{{Path: "/v2", PathType: model.PathTypeExact,
		Backend: model.IngressBackend{ServiceName: "web", PortNumber: 80}}}}}
	store.UpsertIngress(&ing)
	second := pushcontext.Build(store, gatewayTestPushOptions(), first,
		&model.PushRequest{Full: true, ConfigsUpdated: map[model.ConfigKey]struct{}{ingressKey(ing.Key()): {}}})

	proxy := gatewayProxy(ingressGatewayLabels)
	types := []struct {
		url string
		w   *model.WatchedResource
	}{
		{ListenerType, &model.WatchedResource{TypeURL: ListenerType, Wildcard: true}},
		{RouteType, &model.WatchedResource{TypeURL: RouteType, Wildcard: true}},
		{SecretType, &model.WatchedResource{TypeURL: SecretType, Wildcard: true}},
	}
	want := map[*pushcontext.PushContext]map[string]model.Resources{}
	for _, push := range []*pushcontext.PushContext{first, second} {
		fresh := New(Options{}).ByTypeURL()
		want[push] = map[string]model.Resources{}
		for _, tt := range types {
			res, err := fresh[tt.url].Generate(proxy, push, tt.w, &model.PushRequest{Full: true})
			if err != nil {
				t.Fatal(err)
			}
			want[push][tt.url] = res
		}
	}
	if proto.Equal(want[first][RouteType][0].Resource, want[second][RouteType][0].Resource) {
		t.Fatal("the two pushes' routes are the same: the test would prove nothing")
	}

	shared := New(Options{}).ByTypeURL()
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for i := range 16 {
		push := first
		if i%2 == 1 {
			push = second
		}
		wg.Go(func() {
			for _, tt := range types {
				res, err := shared[tt.url].Generate(proxy, push, tt.w, &model.PushRequest{Full: true})
				if err != nil {
					errs <- err.Error()
					return
				}
				if !slices.EqualFunc(res, want[push][tt.url], func(a, b model.Resource) bool {
					return a.Name == b.Name && proto.Equal(a.Resource, b.Resource)
				}) {
					errs <- tt.url + " differs from a serial generation for push " + push.Version()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
