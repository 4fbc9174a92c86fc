package envoygen

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// TestListenerGolden runs every testdata/listeners/<case>.in.yaml through
// LDS and then RDS (asking for the routes the listeners name, as Envoy
// does) and compares the result with <case>.out.yaml.
func TestListenerGolden(t *testing.T) {
	runGoldenCases(t, "listeners", runListenerGolden)
}

func runListenerGolden(t *testing.T, f fixture) []byte {
	t.Helper()
	var logs bytes.Buffer
	opts := Options{Logger: testLogger(&logs)}
	push := pushcontext.Build(f.store, testPushOptions(), nil, nil)
	tp := f.onlyProxy(t)
	proxy := tp.model()

	listeners, routes, rw := generateListenersAndRoutes(t, NewListenerGenerator(opts), NewRouteGenerator(opts), tp, proxy, push)
	if proxy.Type == model.SidecarProxy && len(routes) != len(rw.ResourceNames) {
		t.Errorf("asked for routes %v, got %d", rw.ResourceNames, len(routes))
	}

	warnings := logLines(&logs)
	return renderGolden(t,
		goldenSection{"listeners", renderResources(t, listeners), false},
		goldenSection{"routes", renderResources(t, routes), false},
		goldenSection{"warnings", warnings, len(warnings) == 0},
	)
}

// generateListenersAndRoutes asks lds for the listeners tp requests and
// then rds for the routes it requests (by default those the listeners name,
// as Envoy does), checking both responses. It returns the RDS request too.
func generateListenersAndRoutes(t *testing.T, lds, rds Generator, tp testProxy, proxy *model.Proxy, push *pushcontext.PushContext) (listeners, routes model.Resources, rw *model.WatchedResource) {
	t.Helper()
	lw := &model.WatchedResource{TypeURL: ListenerType, Wildcard: tp.Request.Listeners == nil,
		ResourceNames: sortedNames(tp.Request.Listeners)}
	listeners = generateTwice(t, lds, proxy, push, lw)
	checkResources(t, lw, listeners)

	routeNames := tp.Request.Routes
	if routeNames == nil {
		routeNames = referencedRoutes(t, listeners)
	}
	rw = &model.WatchedResource{TypeURL: RouteType, ResourceNames: sortedNames(routeNames)}
	routes = generateTwice(t, rds, proxy, push, rw)
	checkResources(t, rw, routes)
	return listeners, routes, rw
}

// checkUniqueDomains asserts what Envoy checks beyond ValidateAll: no
// domain appears in two virtual hosts, and virtual host names are unique.
func checkUniqueDomains(t *testing.T, rc *route.RouteConfiguration) {
	t.Helper()
	domains := map[string]string{}
	names := map[string]bool{}
	for _, vh := range rc.GetVirtualHosts() {
		if names[vh.GetName()] {
			t.Errorf("route %s: virtual host %s twice", rc.GetName(), vh.GetName())
		}
		names[vh.GetName()] = true
		for _, d := range vh.GetDomains() {
			if other, dup := domains[strings.ToLower(d)]; dup {
				t.Errorf("route %s: domain %s in virtual hosts %s and %s", rc.GetName(), d, other, vh.GetName())
			}
			domains[strings.ToLower(d)] = vh.GetName()
		}
	}
}

// referencedRoutes are the RDS names the listeners' connection managers use.
func referencedRoutes(t *testing.T, listeners model.Resources) []string {
	t.Helper()
	var names []string
	for _, r := range listeners {
		l := &listener.Listener{}
		if err := r.Resource.UnmarshalTo(l); err != nil {
			t.Fatal(err)
		}
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if f.GetName() != httpConnectionManagerFilter {
					continue
				}
				m := &hcm.HttpConnectionManager{}
				if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
					t.Fatal(err)
				}
				if n := m.GetRds().GetRouteConfigName(); n != "" && !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
		}
	}
	return names
}
