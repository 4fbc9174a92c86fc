package envoygen

import (
	"testing"

	"github.com/meshpilot/meshpilot/internal/xdstest"
)

// TestSimulationIngress: requests at the ingress gateway, which listens on
// its Service's target ports (8080 for HTTP, 8443 for HTTPS) and ignores
// the Host header's port when it picks a virtual host.
//
// Kubernetes path semantics: Prefix matches whole path elements and
// ignores a trailing slash; the longest matching path wins, and Exact wins
// over Prefix for the same path. ImplementationSpecific is Istio's: exact,
// unless the path ends in "/*" or ".*", which becomes a prefix of what
// comes before; Istio matches every Ingress prefix by path element (its
// "ingress" route semantics: path_separated_prefix). Ingresses sharing a
// host merge into one virtual host, the oldest winning a path both
// define; rules without a host, and defaultBackend as their last route,
// serve "*" only, so a named host with no matching path is a 404. TLS
// picks the filter chain by SNI, and each chain has its own route
// configuration. A backend that is an alias (an ExternalName Service
// naming a Service of the mesh) is routed to its target's cluster, on the
// backend's port number, as cluster DNS would send it; any other
// ExternalName backend to its DNS cluster.
func TestSimulationIngress(t *testing.T) {
	sims := simulations(t, "ingress")
	const gw = "10.1.0.50"
	http := func(host, path string) xdstest.Request {
		return xdstest.Request{DestinationIP: gw, Port: 8080, Host: host, Path: path}
	}
	https := func(sni, host, path string) xdstest.Request {
		return xdstest.Request{DestinationIP: gw, Port: 8443, SNI: sni, Host: host, Path: path}
	}
	// backend is a Service port's cluster and its one endpoint.
	type backend struct{ cluster, endpoint string }
	svc := func(name, port, endpoint string) backend {
		return backend{"outbound|" + port + "||" + name + ".app.svc.cluster.local", endpoint}
	}
	var (
		web      = svc("web", "80", "10.4.0.1:8080")
		fallback = svc("fallback", "8000", "10.4.0.3:8000")
		cart     = svc("cart", "80", "10.4.0.4:8080")
		catalog  = svc("catalog", "80", "10.4.0.5:8080")
		files    = svc("files", "80", "10.4.0.6:8080")
		docs     = svc("docs", "80", "10.4.0.7:8080")
		wild     = svc("wild", "80", "10.4.0.8:8080")
		partner  = svc("partner", "443", "api.partner.example:443")
	)
	const (
		shop     = "shop.example.com"
		impl     = "impl.example.com"
		wildHost = "*.wild.example.com"
		httpRC   = "http.8080"
	)
	to := func(listener, routeConfig, vhost string, b backend) routeWant {
		return routeWant{xdstest.OutcomeRouted, listener, routeConfig, vhost, b.cluster, nil, "", []xdstest.Endpoint{{Address: b.endpoint}}}
	}
	httpTo := func(vhost string, b backend) routeWant { return to("0.0.0.0_8080", httpRC, vhost, b) }
	httpsTo := func(routeConfig, vhost string, b backend) routeWant { return to("0.0.0.0_8443", routeConfig, vhost, b) }
	notFound := func(vhost string) routeWant {
		return routeWant{Outcome: xdstest.OutcomeNoRoute, Listener: "0.0.0.0_8080", RouteConfig: httpRC, VirtualHost: vhost}
	}
	closed := routeWant{Outcome: xdstest.OutcomeNoListener, Listener: "0.0.0.0_8443"}
	runRouteCases(t, sims, []routeCase{
		{"Prefix: the path itself", "gateway", http(shop, "/cart"), httpTo(shop, cart)},
		{"Prefix: trailing slash", "gateway", http(shop, "/cart/"), httpTo(shop, cart)},
		{"Prefix: below it", "gateway", http(shop, "/cart/items?id=1"), httpTo(shop, cart)},
		{"Prefix: not a longer element", "gateway", http(shop, "/cartoon"), notFound(shop)},
		{"Prefix: the longest path wins", "gateway", http(shop, "/cart/checkout/pay"), httpTo(shop, web)},
		{"Prefix written with a trailing slash matches without it", "gateway", http(shop, "/docs"), httpTo(shop, docs)},
		{"Prefix written with a trailing slash, below it", "gateway", http(shop, "/docs/intro"), httpTo(shop, docs)},
		{"Exact beats Prefix for the same path", "gateway", http(shop, "/exact"), httpTo(shop, web)},
		{"Exact: only the path; Prefix takes below it", "gateway", http(shop, "/exact/sub"), httpTo(shop, cart)},
		{"merged host: the newer Ingress's path", "gateway", http(shop, "/catalog/x"), httpTo(shop, catalog)},
		{"merged host: the older Ingress wins a shared path", "gateway", http(shop, "/shared"), httpTo(shop, cart)},
		{"the Host's port takes no part in the match", "gateway", http(shop+":8080", "/cart"), httpTo(shop, cart)},
		{"Host is case-insensitive", "gateway", http("SHOP.example.com", "/cart"), httpTo(shop, cart)},
		{"ImplementationSpecific /*: the prefix itself", "gateway", http(impl, "/static"), httpTo(impl, files)},
		{"ImplementationSpecific /*: below it", "gateway", http(impl, "/static/app.js"), httpTo(impl, files)},
		{"ImplementationSpecific /*: by path element", "gateway", http(impl, "/staticfoo"), notFound(impl)},
		{"ImplementationSpecific .*: below the prefix", "gateway", http(impl, "/v1/x"), httpTo(impl, catalog)},
		{"ImplementationSpecific .*: by path element", "gateway", http(impl, "/v1beta"), notFound(impl)},
		{"ImplementationSpecific: exact", "gateway", http(impl, "/api"), httpTo(impl, web)},
		{"ImplementationSpecific: exact, not below", "gateway", http(impl, "/api/v1"), notFound(impl)},
		{"wildcard host", "gateway", http("a.wild.example.com", "/"), httpTo(wildHost, wild)},
		// As in Istio and Envoy, not only one label deep as the Ingress API has it.
		{"wildcard host, two labels deep", "gateway", http("a.b.wild.example.com", "/"), httpTo(wildHost, wild)},
		{"rule without a host serves any host", "gateway", http("other.example.com", "/any/x"), httpTo("*", web)},
		{"defaultBackend catches the rest of any host", "gateway", http("other.example.com", "/else"), httpTo("*", fallback)},
		{"an alias backend reaches its target's cluster", "gateway", http("alias.example.com", "/store"), httpTo("alias.example.com", cart)},
		{"an ExternalName backend outside the mesh reaches its DNS cluster", "gateway", http("alias.example.com", "/partner"),
			httpTo("alias.example.com", partner)},
		{"TLS: SNI picks the host's chain", "gateway", https(shop, shop, "/cart"), httpsTo("https.8443."+shop, shop, cart)},
		{"TLS: wildcard SNI chain", "gateway", https("a.wild.example.com", "a.wild.example.com", "/"),
			httpsTo("https.8443."+wildHost, wildHost, wild)},
		{"TLS: an SNI no entry serves is closed", "gateway", https("other.example.com", "other.example.com", "/"), closed},
		{"TLS: no SNI is closed", "gateway", https("", shop, "/cart"), closed},
	})
}

// TestSimulationIngressKeepsTheHostPort: the gateway ignores the Host
// header's port to pick the virtual host, and hands the header to the
// backend as the client sent it, as Istio's gateways do; a backend that
// writes absolute URLs (redirects, links) keeps the port its clients used.
func TestSimulationIngressKeepsTheHostPort(t *testing.T) {
	sim := simulations(t, "ingress")["gateway"]
	for _, host := range []string{"shop.example.com:8080", "shop.example.com"} {
		r := sim.Route(xdstest.Request{DestinationIP: "10.1.0.50", Port: 8080, Host: host, Path: "/cart"})
		if r.Outcome != xdstest.OutcomeRouted || r.VirtualHost != "shop.example.com" {
			t.Fatalf("Host %s: outcome %v at virtual host %q: %s", host, r.Outcome, r.VirtualHost, r.Detail)
		}
		if r.Authority != host {
			t.Errorf("Host %s reached the backend as %q", host, r.Authority)
		}
	}
}
