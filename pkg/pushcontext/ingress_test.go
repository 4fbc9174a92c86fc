package pushcontext

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// ingressStore holds the gateway Service, the "istio" IngressClass (ours),
// the "nginx" one (not ours), and services a and b in namespace web (ports
// http 80 and grpc 9090), plus what a case adds.
func ingressStore(ingresses []*model.Ingress, extra func(model.Store)) model.Store {
	store := model.NewStore()
	store.UpsertService(gatewayService())
	store.UpsertService(newService("web", "a", nil))
	store.UpsertService(newService("web", "b", nil))
	store.UpsertIngressClass(ingressClass("istio", model.IngressController, false))
	store.UpsertIngressClass(ingressClass("nginx", "k8s.io/ingress-nginx", false))
	for _, i := range ingresses {
		store.UpsertIngress(i)
	}
	if extra != nil {
		extra(store)
	}
	return store
}

func TestIngressTranslation(t *testing.T) {
	a80, a9090, b80 := cluster("web", "a", 80), cluster("web", "a", 9090), cluster("web", "b", 80)
	const ports = "ports 8080 8443"
	cases := []struct {
		name      string
		ingresses []*model.Ingress
		extra     func(model.Store)
		opts      IngressOptions
		want      []string
		// wantProblems are per Ingress; every other owned Ingress has none.
		wantProblems map[string][]string
	}{
		{
			name: "pathType semantics",
			ingresses: []*model.Ingress{ing("web", "paths", 0, rule("example.com",
				path(model.PathTypeExact, "/exact/", toPort("a", 80)),
				path(model.PathTypePrefix, "/prefix/", toPort("a", 80)),
				path(model.PathTypeImplementationSpecific, "/impl", toPort("a", 80)),
				path(model.PathTypeImplementationSpecific, "/star/*", toPort("a", 80)),
				path(model.PathTypeImplementationSpecific, "", toPort("b", 80)),
			))},
			want: []string{ports,
				"example.com Exact /exact/ -> " + a80 + " (web/paths)",
				"example.com Prefix /prefix -> " + a80 + " (web/paths)",
				"example.com Exact /impl -> " + a80 + " (web/paths)",
				"example.com Prefix /star -> " + a80 + " (web/paths)",
				"example.com Prefix / -> " + b80 + " (web/paths)",
			},
		},
		{
			// Istio: ImplementationSpecific is exact, unless the path ends in
			// "/*" or ".*": then it is a path-element prefix of what precedes
			// the suffix; "", "*", "/*" and ".*" match everything.
			name: "ImplementationSpecific as Istio reads it",
			ingresses: []*model.Ingress{ing("web", "impl", 0,
				rule("example.com",
					path(model.PathTypeImplementationSpecific, "/exact", toPort("a", 80)),
					path(model.PathTypeImplementationSpecific, "/exact/", toPort("a", 80)),
					path(model.PathTypeImplementationSpecific, "/slash/*", toPort("a", 80)),
					path(model.PathTypeImplementationSpecific, "/dot.*", toPort("a", 80)),
					path(model.PathTypeImplementationSpecific, "/slash-dot/.*", toPort("a", 80)),
				),
				rule("slash-star.example.com", path(model.PathTypeImplementationSpecific, "/*", toPort("b", 80))),
				rule("dot-star.example.com", path(model.PathTypeImplementationSpecific, ".*", toPort("b", 80))),
				rule("slash-dot-star.example.com", path(model.PathTypeImplementationSpecific, "/.*", toPort("b", 80))),
				rule("star.example.com", path(model.PathTypeImplementationSpecific, "*", toPort("b", 80))),
				rule("empty.example.com", path(model.PathTypeImplementationSpecific, "", toPort("b", 80))),
			)},
			want: []string{ports,
				"dot-star.example.com Prefix / -> " + b80 + " (web/impl)",
				"empty.example.com Prefix / -> " + b80 + " (web/impl)",
				"example.com Prefix /slash-dot -> " + a80 + " (web/impl)",
				"example.com Exact /exact/ -> " + a80 + " (web/impl)",
				"example.com Exact /exact -> " + a80 + " (web/impl)",
				"example.com Prefix /slash -> " + a80 + " (web/impl)",
				"example.com Prefix /dot -> " + a80 + " (web/impl)",
				"slash-dot-star.example.com Prefix / -> " + b80 + " (web/impl)",
				"slash-star.example.com Prefix / -> " + b80 + " (web/impl)",
				"star.example.com Prefix / -> " + b80 + " (web/impl)",
			},
		},
		{
			// Exact and Prefix paths are literal: RFC 3986 lets a path
			// segment hold "$", "(", ")", "*" and "+", and the API server
			// accepts them (OData's /$metadata and /Items(1), /c++).
			// ImplementationSpecific paths with them look like regular
			// expressions, which are not supported.
			name: "Exact and Prefix paths may hold every character of a path segment",
			ingresses: []*model.Ingress{ing("web", "literal", 0, rule("example.com",
				path(model.PathTypeExact, "/odata/$metadata", toPort("a", 80)),
				path(model.PathTypeExact, "/odata/Items(1)", toPort("a", 80)),
				path(model.PathTypePrefix, "/c++", toPort("b", 80)),
				path(model.PathTypePrefix, "/files/*", toPort("b", 80)),
				path(model.PathTypeImplementationSpecific, "/re(gex)+", toPort("b", 80)),
			))},
			want: []string{ports,
				"example.com Exact /odata/$metadata -> " + a80 + " (web/literal)",
				"example.com Exact /odata/Items(1) -> " + a80 + " (web/literal)",
				"example.com Prefix /files/* -> " + b80 + " (web/literal)",
				"example.com Prefix /c++ -> " + b80 + " (web/literal)",
			},
			wantProblems: map[string][]string{"web/literal": {
				`host "example.com" path "/re(gex)+": invalid path for pathType ImplementationSpecific: '(' is not allowed (regular expressions, queries and fragments are not supported); dropped`,
			}},
		},
		{
			name: "longer paths first, Exact before Prefix at equal length",
			ingresses: []*model.Ingress{ing("web", "order", 0, rule("example.com",
				path(model.PathTypePrefix, "/", toPort("b", 80)),
				path(model.PathTypePrefix, "/api", toPort("a", 80)),
				path(model.PathTypePrefix, "/api/v1", toPort("a", 9090)),
				path(model.PathTypeExact, "/api", toPort("b", 80)),
				path(model.PathTypePrefix, "/abc", toPort("b", 80)),
			))},
			want: []string{ports,
				"example.com Prefix /api/v1 -> " + a9090 + " (web/order)",
				"example.com Exact /api -> " + b80 + " (web/order)",
				"example.com Prefix /abc -> " + b80 + " (web/order)",
				"example.com Prefix /api -> " + a80 + " (web/order)",
				"example.com Prefix / -> " + b80 + " (web/order)",
			},
		},
		{
			name: "backends by port number and by port name",
			ingresses: []*model.Ingress{ing("web", "ports", 0, rule("example.com",
				path(model.PathTypePrefix, "/number", toPort("a", 9090)),
				path(model.PathTypePrefix, "/name", toNamedPort("a", "http")),
			))},
			want: []string{ports,
				"example.com Prefix /number -> " + a9090 + " (web/ports)",
				"example.com Prefix /name -> " + a80 + " (web/ports)",
			},
		},
		{
			name: "defaultBackend catches the rest of its hosts and of any host",
			ingresses: []*model.Ingress{withDefault(ing("web", "dflt", 0,
				rule("example.com", path(model.PathTypePrefix, "/api", toPort("a", 80))),
				rule("root.example.com", path(model.PathTypePrefix, "/", toPort("a", 80))),
			), toPort("b", 80))},
			want: []string{ports,
				"example.com Prefix /api -> " + a80 + " (web/dflt)",
				"example.com Prefix / -> " + b80 + " (web/dflt)",
				"root.example.com Prefix / -> " + a80 + " (web/dflt)",
				"* Prefix / -> " + b80 + " (web/dflt)",
			},
		},
		{
			name: "rules without host go to any host, sorted last",
			ingresses: []*model.Ingress{ing("web", "any", 0,
				rule("", path(model.PathTypePrefix, "/any", toPort("a", 80))),
				rule("z.example.com", path(model.PathTypePrefix, "/z", toPort("a", 80))),
				rule("*.example.com", path(model.PathTypePrefix, "/w", toPort("b", 80))),
			)},
			want: []string{ports,
				"*.example.com Prefix /w -> " + b80 + " (web/any)",
				"z.example.com Prefix /z -> " + a80 + " (web/any)",
				"* Prefix /any -> " + a80 + " (web/any)",
			},
		},
		{
			// Host names are case-insensitive, and Envoy refuses a route
			// configuration in which two virtual hosts share a domain in
			// any case: that would take down every Ingress's routes. The
			// API server only takes lower-case hosts; files take any.
			name: "hosts differing only in case are one host",
			ingresses: []*model.Ingress{
				ing("web", "upper", 0, rule("Shop.Example.com", path(model.PathTypePrefix, "/a", toPort("a", 80)))),
				ing("web", "lower", 1, rule("shop.example.com",
					path(model.PathTypePrefix, "/b", toPort("b", 80)),
					path(model.PathTypePrefix, "/a", toPort("b", 80)),
				)),
				ing("web", "wild", 2,
					rule("*.EXAMPLE.com", path(model.PathTypePrefix, "/", toPort("a", 80))),
					rule("*.example.com", path(model.PathTypePrefix, "/w", toPort("b", 80))),
				),
			},
			want: []string{ports,
				"*.example.com Prefix /w -> " + b80 + " (web/wild)",
				"*.example.com Prefix / -> " + a80 + " (web/wild)",
				"shop.example.com Prefix /a -> " + a80 + " (web/upper)",
				"shop.example.com Prefix /b -> " + b80 + " (web/lower)",
			},
			wantProblems: map[string][]string{"web/lower": {
				`host "shop.example.com" Prefix path "/a": already routed by web/upper; dropped`,
			}},
		},
		{
			name: "Ingresses sharing a host merge oldest first; later duplicates are dropped and reported",
			ingresses: []*model.Ingress{
				ing("web", "newer", 5, rule("example.com",
					path(model.PathTypePrefix, "/shared", toPort("b", 80)),
					path(model.PathTypePrefix, "/newer", toPort("b", 80)),
					path(model.PathTypeExact, "/shared", toPort("b", 80)),
				)),
				ing("web", "older", 1, rule("example.com",
					path(model.PathTypePrefix, "/shared/", toPort("a", 80)),
					path(model.PathTypePrefix, "/older", toPort("a", 80)),
					path(model.PathTypePrefix, "/older", toPort("a", 9090)),
				)),
			},
			want: []string{ports,
				"example.com Exact /shared -> " + b80 + " (web/newer)",
				"example.com Prefix /shared -> " + a80 + " (web/older)",
				"example.com Prefix /newer -> " + b80 + " (web/newer)",
				"example.com Prefix /older -> " + a80 + " (web/older)",
			},
			wantProblems: map[string][]string{
				"web/newer": {`host "example.com" Prefix path "/shared": already routed by web/older; dropped`},
				"web/older": {`host "example.com" Prefix path "/older": already routed by an earlier path of this Ingress; dropped`},
			},
		},
		{
			name: "two defaultBackends: the older one wins any host",
			ingresses: []*model.Ingress{
				withDefault(ing("web", "second", 2), toPort("b", 80)),
				withDefault(ing("web", "first", 1), toPort("a", 80)),
				ing("web", "rules", 3, rule("", path(model.PathTypePrefix, "/x", toPort("b", 80)))),
			},
			want: []string{ports,
				"* Prefix /x -> " + b80 + " (web/rules)",
				"* Prefix / -> " + a80 + " (web/first)",
			},
			wantProblems: map[string][]string{
				"web/second": {"defaultBackend: the older Ingress web/first already has a defaultBackend; dropped"},
			},
		},
		{
			name: "a rule for / beats any defaultBackend, whatever its age",
			ingresses: []*model.Ingress{
				withDefault(ing("web", "old", 0), toPort("a", 80)),
				ing("web", "new", 1, rule("", path(model.PathTypePrefix, "/", toPort("b", 80)))),
			},
			want: []string{ports, "* Prefix / -> " + b80 + " (web/new)"},
		},
		{
			name: "bad paths and backends are dropped alone, each with its reason",
			ingresses: []*model.Ingress{withDefault(ing("web", "bad", 0, rule("example.com",
				path(model.PathTypePrefix, "relative", toPort("a", 80)),
				path(model.PathTypeExact, "/re(gex)?", toPort("a", 80)),
				path(model.PathTypePrefix, "/q?x=1", toPort("a", 80)),
				path("Regex", "/r", toPort("a", 80)),
				path(model.PathTypePrefix, "/missing-service", toPort("nope", 80)),
				path(model.PathTypePrefix, "/missing-port", toPort("a", 81)),
				path(model.PathTypePrefix, "/missing-name", toNamedPort("a", "admin")),
				path(model.PathTypePrefix, "/no-port", model.IngressBackend{ServiceName: "a"}),
				path(model.PathTypePrefix, "/resource", model.IngressBackend{Resource: "StorageBucket"}),
				path(model.PathTypePrefix, "/good", toPort("a", 80)),
			)), model.IngressBackend{ServiceName: "gone", PortNumber: 80})},
			want: []string{ports, "example.com Prefix /good -> " + a80 + " (web/bad)"},
			wantProblems: map[string][]string{"web/bad": {
				"defaultBackend: backend service web/gone not found; dropped",
				`host "example.com" path "/missing-name": backend service web/a has no port named "admin"; dropped`,
				`host "example.com" path "/missing-port": backend service web/a has no port 81; dropped`,
				`host "example.com" path "/missing-service": backend service web/nope not found; dropped`,
				`host "example.com" path "/no-port": backend service web/a names no port; dropped`,
				`host "example.com" path "/q?x=1": invalid path for pathType Prefix: '?' is not allowed (regular expressions, queries and fragments are not supported); dropped`,
				`host "example.com" path "/r": unknown pathType "Regex"; dropped`,
				`host "example.com" path "/re(gex)?": invalid path for pathType Exact: '?' is not allowed (regular expressions, queries and fragments are not supported); dropped`,
				`host "example.com" path "/resource": resource backends (StorageBucket) are not supported; dropped`,
				`host "example.com" path "relative": invalid path: it must start with "/"; dropped`,
			}},
		},
		{
			// Cluster DNS answers an alias with a CNAME, so its clients
			// reach the target on the port number they used.
			name: "an alias backend is routed to its target, a name outside the mesh to its own cluster",
			ingresses: []*model.Ingress{ing("web", "aliases", 0, rule("example.com",
				path(model.PathTypePrefix, "/number", toPort("a-alias", 80)),
				path(model.PathTypePrefix, "/name", toNamedPort("a-alias", "grpc")),
				path(model.PathTypePrefix, "/chain", toPort("chain", 9090)),
				path(model.PathTypePrefix, "/no-target-port", toPort("a-alias", 81)),
				path(model.PathTypePrefix, "/outside", toPort("outside", 80)),
				path(model.PathTypePrefix, "/outside-no-port", toPort("outside", 81)),
				path(model.PathTypePrefix, "/hidden", toPort("to-hidden", 80)),
			))},
			extra: func(s model.Store) {
				alias := externalService("web", "a-alias", hostname("web", "a"), nil)
				alias.Ports = []*model.Port{{Name: "grpc", Port: 9090, Protocol: model.ProtocolGRPC}}
				s.UpsertService(alias)
				s.UpsertService(externalService("web", "chain", hostname("web", "a-alias"), nil))
				s.UpsertService(externalService("web", "outside", "a.example.com", nil))
				// The gateway (istio-system) cannot see hidden, so its
				// alias keeps the DNS cluster there.
				s.UpsertService(newService("web", "hidden", model.ExportTo{"web"}))
				s.UpsertService(externalService("web", "to-hidden", hostname("web", "hidden"), nil))
			},
			want: []string{ports,
				"example.com Prefix /outside -> " + cluster("web", "outside", 80) + " (web/aliases)",
				"example.com Prefix /hidden -> " + cluster("web", "to-hidden", 80) + " (web/aliases)",
				"example.com Prefix /number -> " + a80 + " (web/aliases)",
				"example.com Prefix /chain -> " + a9090 + " (web/aliases)",
				"example.com Prefix /name -> " + a9090 + " (web/aliases)",
			},
			wantProblems: map[string][]string{"web/aliases": {
				`host "example.com" path "/no-target-port": backend service web/a-alias is an alias of ` + hostname("web", "a") + `, which has no port 81; dropped`,
				`host "example.com" path "/outside-no-port": backend service web/outside has no port 81; dropped`,
			}},
		},
		{
			name: "only owned Ingresses are served",
			ingresses: []*model.Ingress{
				ing("web", "by-class", 0, rule("class.example.com", path(model.PathTypePrefix, "/", toPort("a", 80)))),
				withClass(ing("web", "by-annotation", 0, rule("annotation.example.com", path(model.PathTypePrefix, "/", toPort("a", 80)))), "", "istio"),
				withClass(ing("web", "other-class", 0, rule("nginx.example.com", path(model.PathTypePrefix, "/", toPort("a", 80)))), "nginx", ""),
				withClass(ing("web", "other-annotation", 0, rule("x.example.com", path(model.PathTypePrefix, "/", toPort("a", 80)))), "", "nginx"),
				withClass(ing("web", "unknown-class", 0, rule("u.example.com", path(model.PathTypePrefix, "/", toPort("a", 80)))), "missing", ""),
				// STRICT by default: no class at all is not ours, and its
				// problems are not reported.
				withClass(ing("web", "classless", 0, rule("none.example.com", path(model.PathTypePrefix, "bad", toPort("a", 80)))), "", ""),
			},
			want: []string{ports,
				"annotation.example.com Prefix / -> " + a80 + " (web/by-annotation)",
				"class.example.com Prefix / -> " + a80 + " (web/by-class)",
			},
		},
		{
			name: "DEFAULT mode takes Ingresses without a class",
			ingresses: []*model.Ingress{
				withClass(ing("web", "classless", 0, rule("none.example.com", path(model.PathTypePrefix, "/", toPort("a", 80)))), "", ""),
			},
			opts: IngressOptions{Ownership: model.IngressOwnership{Mode: model.IngressModeDefault}},
			want: []string{ports, "none.example.com Prefix / -> " + a80 + " (web/classless)"},
		},
		{
			name: "a default IngressClass of ours takes Ingresses without a class",
			ingresses: []*model.Ingress{
				withClass(ing("web", "classless", 0, rule("none.example.com", path(model.PathTypePrefix, "/", toPort("a", 80)))), "", ""),
			},
			extra: func(s model.Store) {
				s.UpsertIngressClass(ingressClass("mesh-default", model.IngressController, true))
			},
			want: []string{ports, "none.example.com Prefix / -> " + a80 + " (web/classless)"},
		},
		{
			name: "listen ports: a named targetPort falls back to the service port, a missing port is 0",
			ingresses: []*model.Ingress{
				ing("web", "x", 0, rule("example.com", path(model.PathTypePrefix, "/", toPort("a", 80)))),
			},
			extra: func(s model.Store) {
				gw := gatewayService()
				gw.Ports = []*model.Port{{Name: "http", Port: 80, TargetPortName: "web"}}
				s.UpsertService(gw)
			},
			want: []string{"ports 80 0", "example.com Prefix / -> " + a80 + " (web/x)"},
		},
		{
			name: "a custom gateway Service",
			ingresses: []*model.Ingress{
				ing("web", "x", 0, rule("example.com", path(model.PathTypePrefix, "/", toPort("a", 80)))),
			},
			opts: IngressOptions{GatewayService: model.NamespacedName{Namespace: "web", Name: "b"}},
			want: []string{"ports 8080 0", "example.com Prefix / -> " + a80 + " (web/x)"},
		},
		{
			name: "no gateway Service: nothing is served, problems are still reported",
			ingresses: []*model.Ingress{
				ing("web", "x", 0, rule("example.com", path(model.PathTypePrefix, "/", toPort("nope", 80)))),
			},
			extra: func(s model.Store) {
				s.DeleteService(model.NamespacedName{Namespace: "istio-system", Name: "istio-ingressgateway"})
			},
			wantProblems: map[string][]string{"web/x": {`host "example.com" path "/": backend service web/nope not found; dropped`}},
		},
		{
			name:      "no owned Ingress: nothing is served",
			ingresses: []*model.Ingress{withClass(ing("web", "x", 0, rule("example.com", path(model.PathTypePrefix, "/", toPort("a", 80)))), "nginx", "")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := ingressStore(tc.ingresses, tc.extra)
			opts := testOpts
			opts.Ingress = tc.opts
			pc := Build(store, opts, nil, nil)
			if diff := cmp.Diff(tc.want, describeGateway(pc.IngressGateway())); diff != "" {
				t.Errorf("gateway (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantProblems, problemsByName(pc.IngressProblems())); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
			// The summary reports the same problems.
			var fromSummary int
			for _, p := range pc.Summary().Problems {
				if p.Kind == model.KindIngress.String() {
					fromSummary++
				}
			}
			var want int
			for _, list := range tc.wantProblems {
				want += len(list)
			}
			if fromSummary != want {
				t.Errorf("summary lists %d Ingress problems, want %d", fromSummary, want)
			}
		})
	}
}

func problemsByName(in map[model.NamespacedName][]string) map[string][]string {
	if len(in) == 0 {
		return nil
	}
	out := map[string][]string{}
	for k, v := range in {
		out[k.String()] = v
	}
	return out
}

func TestIsIngressGateway(t *testing.T) {
	custom := testOpts
	custom.Ingress.GatewaySelector = map[string]string{"app": "edge", "tier": "front"}
	custom.Ingress.GatewayService = model.NamespacedName{Namespace: "edge", Name: "gateway"}
	router := func(ns string, labels map[string]string) *model.Proxy {
		return &model.Proxy{Type: model.Router, Namespace: ns, Labels: labels}
	}
	defaultLabels := map[string]string{"istio": "ingressgateway", "x": "y"}
	cases := []struct {
		name  string
		opts  Options
		proxy *model.Proxy
		want  bool
	}{
		{"router with the default labels", testOpts, router("istio-system", defaultLabels), true},
		{"router with the labels, outside the gateway Service's namespace", testOpts, router("app", defaultLabels), false},
		{"router with other labels", testOpts, router("istio-system", map[string]string{"istio": "egressgateway"}), false},
		{"router without labels", testOpts, router("istio-system", nil), false},
		{"sidecar with the labels", testOpts, &model.Proxy{Type: model.SidecarProxy, Namespace: "istio-system", Labels: defaultLabels}, false},
		{"nil proxy", testOpts, nil, false},
		{"custom selector, all labels", custom, router("edge", map[string]string{"app": "edge", "tier": "front"}), true},
		{"custom selector, some labels", custom, router("edge", map[string]string{"app": "edge"}), false},
		{"custom selector, the default gateway namespace", custom, router("istio-system", map[string]string{"app": "edge", "tier": "front"}), false},
	}
	store := ingressStore(nil, nil)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Build(store, tc.opts, nil, nil).IsIngressGateway(tc.proxy); got != tc.want {
				t.Errorf("IsIngressGateway = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestIngressSummary(t *testing.T) {
	cert := newTestCert(t, "example.com")
	store := ingressStore([]*model.Ingress{
		withTLS(withDefault(ing("web", "x", 0,
			rule("example.com", path(model.PathTypePrefix, "/a", toPort("a", 80)), path(model.PathTypePrefix, "/b", toPort("nope", 80))),
		), toPort("b", 80)), "cert", "example.com"),
		withClass(ing("web", "not-ours", 0), "nginx", ""),
	}, func(s model.Store) { s.UpsertSecret(tlsSecret("web", "cert", cert)) })
	got := Build(store, testOpts, nil, nil).Summary().Ingress
	want := IngressSummary{
		Owned: 1, Ignored: 1, WithProblems: 1, HTTPPort: 8080, HTTPSPort: 8443,
		VirtualHosts: 2, Routes: 3, TLSHosts: 1, Secrets: 1,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ingress summary (-want +got):\n%s", diff)
	}
}
