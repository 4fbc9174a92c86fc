package envoygen

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// TestListenerGolden runs every testdata/listeners/<case>.in.yaml through
// LDS and then RDS (asking for the routes the listeners name, as Envoy
// does) and compares the result with <case>.out.yaml.
func TestListenerGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/listeners/*.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) == 0 {
		t.Fatal("no listener golden cases")
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			f := loadListenerFixture(t, in)
			got := runListenerGolden(t, f)
			xdstest.Golden(t, filepath.Join("testdata", "listeners", name+".out.yaml"), got)
		})
	}
}

type listenerGoldenOutput struct {
	Listeners []json.RawMessage
	Routes    []json.RawMessage
	Warnings  []string
}

func runListenerGolden(t *testing.T, f listenerFixture) []byte {
	t.Helper()
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	opts := Options{Logger: logger}
	push := pushcontext.Build(f.store, listenerTestPushOptions(), nil, nil)
	proxy := f.proxy.model()

	lw := &model.WatchedResource{TypeURL: ListenerType, Wildcard: f.proxy.Request.Listeners == nil,
		ResourceNames: lrSorted(f.proxy.Request.Listeners)}
	listeners := lrGenerateTwice(t, NewListenerGenerator(opts), proxy, push, lw)
	checkListenerResources(t, lw, listeners)

	routeNames := f.proxy.Request.Routes
	if routeNames == nil {
		routeNames = referencedRoutes(t, listeners)
	}
	rw := &model.WatchedResource{TypeURL: RouteType, ResourceNames: lrSorted(routeNames)}
	routes := lrGenerateTwice(t, NewRouteGenerator(opts), proxy, push, rw)
	checkListenerResources(t, rw, routes)
	if proxy.Type == model.SidecarProxy && len(routes) != len(rw.ResourceNames) {
		t.Errorf("asked for routes %v, got %d", rw.ResourceNames, len(routes))
	}

	doc := listenerGoldenOutput{Listeners: lrRenderResources(t, listeners), Routes: lrRenderResources(t, routes)}
	for line := range strings.Lines(logs.String()) {
		doc.Warnings = append(doc.Warnings, strings.TrimSpace(line))
	}
	return renderListenerGolden(t, doc)
}

// generateTwice generates, then generates again from the caches, which must
// say the same thing.
func lrGenerateTwice(t *testing.T, g Generator, proxy *model.Proxy, push *pushcontext.PushContext, w *model.WatchedResource) model.Resources {
	t.Helper()
	full := &model.PushRequest{Full: true}
	first, err := g.Generate(proxy, push, w, full)
	if err != nil {
		t.Fatalf("%s: %v", w.TypeURL, err)
	}
	again, err := g.Generate(proxy, push, w, full)
	if err != nil {
		t.Fatalf("%s (cached): %v", w.TypeURL, err)
	}
	if diff := cmp.Diff(first, again, cmp.Comparer(proto.Equal)); diff != "" {
		t.Errorf("%s: second generation differs:\n%s", w.TypeURL, diff)
	}
	return first
}

// checkListenerResources asserts what holds for any LDS or RDS output:
// unique names that match the resource, only requested names unless
// wildcard, the right type, and Envoy's validation, deep inside Anys too.
func checkListenerResources(t *testing.T, w *model.WatchedResource, res model.Resources) {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range res {
		if seen[r.Name] {
			t.Errorf("%s: %s returned twice", w.TypeURL, r.Name)
		}
		seen[r.Name] = true
		if !w.Wildcard && !slices.Contains(w.ResourceNames, r.Name) {
			t.Errorf("%s: %s was not requested", w.TypeURL, r.Name)
		}
		if r.Resource.GetTypeUrl() != w.TypeURL {
			t.Errorf("%s: %s has type %s", w.TypeURL, r.Name, r.Resource.GetTypeUrl())
		}
		msg, err := r.Resource.UnmarshalNew()
		if err != nil {
			t.Fatalf("%s: %s: %v", w.TypeURL, r.Name, err)
		}
		var name string
		switch m := msg.(type) {
		case *listener.Listener:
			name = m.GetName()
		case *route.RouteConfiguration:
			name = m.GetName()
			checkUniqueDomains(t, m)
		}
		if name != r.Name {
			t.Errorf("%s: resource %q carries name %q", w.TypeURL, r.Name, name)
		}
		if err := xdstest.ValidateDeep(msg); err != nil {
			t.Errorf("%s: %s fails validation: %v", w.TypeURL, r.Name, err)
		}
	}
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

func lrSorted(s []string) []string {
	if s == nil {
		return nil
	}
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func lrRenderResources(t *testing.T, res model.Resources) []json.RawMessage {
	t.Helper()
	out := []json.RawMessage{}
	for _, r := range res {
		js, err := protojson.Marshal(r.Resource)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, js)
	}
	return out
}

// renderListenerGolden writes the sections in a fixed order (a map would
// sort them), leaving warnings out when there are none.
func renderListenerGolden(t *testing.T, doc listenerGoldenOutput) []byte {
	t.Helper()
	var out bytes.Buffer
	sections := []struct {
		name  string
		value any
		skip  bool
	}{
		{"listeners", doc.Listeners, false},
		{"routes", doc.Routes, false},
		{"warnings", doc.Warnings, len(doc.Warnings) == 0},
	}
	for _, s := range sections {
		if s.skip {
			continue
		}
		js, err := json.Marshal(map[string]any{s.name: s.value})
		if err != nil {
			t.Fatal(err)
		}
		y, err := yaml.JSONToYAML(js)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(y)
	}
	return out.Bytes()
}
