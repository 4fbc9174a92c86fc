package pushcontext

import (
	"testing"
	"time"

	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func vsConfig(ns, name string, age int, spec *networking.VirtualService) *model.Config {
	return &model.Config{
		Kind: model.KindVirtualService, Name: name, Namespace: ns,
		CreationTime: epoch.Add(time.Duration(age) * time.Minute), Spec: spec,
	}
}

// TestVirtualServiceFor asserts which VirtualService a proxy's namespace
// uses for a host, by Istio's rules: short hosts are in the
// VirtualService's namespace; only mesh-bound ones apply; a namespace's
// private ones come before those exported to it by name, which come before
// public ones; oldest first within each; an exact host beats a wildcard.
func TestVirtualServiceFor(t *testing.T) {
	web := hostname("app", "web")
	cases := []struct {
		name    string
		configs []*model.Config
		proxyNS string
		host    string
		want    string // namespace/name, "" for none
	}{
		{
			name:    "short host resolves in the VirtualService's namespace",
			configs: []*model.Config{vsConfig("app", "web", 0, &networking.VirtualService{Hosts: []string{"web"}})},
			proxyNS: "client", host: web, want: "app/web",
		},
		{
			name:    "short host does not name a service of another namespace",
			configs: []*model.Config{vsConfig("other", "web", 0, &networking.VirtualService{Hosts: []string{"web"}})},
			proxyNS: "client", host: web,
		},
		{
			name: "bound to a gateway only: not for sidecars",
			configs: []*model.Config{vsConfig("app", "web", 0, &networking.VirtualService{
				Hosts: []string{web}, Gateways: []string{"istio-system/ingress"}})},
			proxyNS: "client", host: web,
		},
		{
			name: "bound to mesh and a gateway: for sidecars",
			configs: []*model.Config{vsConfig("app", "web", 0, &networking.VirtualService{
				Hosts: []string{web}, Gateways: []string{"istio-system/ingress", "mesh"}})},
			proxyNS: "client", host: web, want: "app/web",
		},
		{
			name: "oldest public one wins",
			configs: []*model.Config{
				vsConfig("b", "newer", 2, &networking.VirtualService{Hosts: []string{web}}),
				vsConfig("a", "older", 1, &networking.VirtualService{Hosts: []string{web}}),
			},
			proxyNS: "client", host: web, want: "a/older",
		},
		{
			name: "the proxy namespace's private one beats an older public one",
			configs: []*model.Config{
				vsConfig("app", "public", 0, &networking.VirtualService{Hosts: []string{web}}),
				vsConfig("client", "private", 5, &networking.VirtualService{Hosts: []string{web}, ExportTo: []string{"."}}),
			},
			proxyNS: "client", host: web, want: "client/private",
		},
		{
			name: "a private one is invisible to other namespaces",
			configs: []*model.Config{
				vsConfig("client", "private", 0, &networking.VirtualService{Hosts: []string{web}, ExportTo: []string{"."}}),
			},
			proxyNS: "elsewhere", host: web,
		},
		{
			name: "exported by name beats public",
			configs: []*model.Config{
				vsConfig("app", "public", 0, &networking.VirtualService{Hosts: []string{web}}),
				vsConfig("app", "for-client", 1, &networking.VirtualService{Hosts: []string{web}, ExportTo: []string{"client"}}),
			},
			proxyNS: "client", host: web, want: "app/for-client",
		},
		{
			name: "an exact host beats an older wildcard",
			configs: []*model.Config{
				vsConfig("app", "all", 0, &networking.VirtualService{Hosts: []string{"*.app.svc.cluster.local"}}),
				vsConfig("app", "web", 1, &networking.VirtualService{Hosts: []string{web}}),
			},
			proxyNS: "client", host: web, want: "app/web",
		},
		{
			name: "a wildcard covers the hosts it names",
			configs: []*model.Config{
				vsConfig("app", "all", 0, &networking.VirtualService{Hosts: []string{"*.app.svc.cluster.local"}}),
			},
			proxyNS: "client", host: web, want: "app/all",
		},
		{
			name: "a wildcard does not cover other domains",
			configs: []*model.Config{
				vsConfig("app", "all", 0, &networking.VirtualService{Hosts: []string{"*.other.svc.cluster.local"}}),
			},
			proxyNS: "client", host: web,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := model.NewStore()
			for _, c := range tc.configs {
				store.UpsertConfig(c)
			}
			pc := Build(store, testOpts, nil, nil)
			got := ""
			if vs := pc.VirtualServiceFor(tc.proxyNS, tc.host); vs != nil {
				got = vs.String()
			}
			if got != tc.want {
				t.Errorf("VirtualServiceFor(%q, %q) = %q, want %q", tc.proxyNS, tc.host, got, tc.want)
			}
		})
	}
}

// TestVirtualServiceIndexReuse asserts that only a VirtualService change
// rebuilds the index, and that it does, so a later push sees the edit.
func TestVirtualServiceIndexReuse(t *testing.T) {
	store := model.NewStore()
	store.UpsertService(newService("app", "web", nil))
	store.UpsertConfig(vsConfig("app", "web", 0, &networking.VirtualService{Hosts: []string{"web"}}))
	first := Build(store, testOpts, nil, nil)

	svcReq := &model.PushRequest{ConfigsUpdated: map[model.ConfigKey]struct{}{{Kind: model.KindService, Namespace: "app", Name: "web"}: {}}}
	second := Build(store, testOpts, first, svcReq)
	if second.virtualServices != first.virtualServices {
		t.Error("a Service change rebuilt the VirtualService index")
	}

	store.DeleteConfig(model.ConfigKey{Kind: model.KindVirtualService, Namespace: "app", Name: "web"})
	vsReq := &model.PushRequest{ConfigsUpdated: map[model.ConfigKey]struct{}{{Kind: model.KindVirtualService, Namespace: "app", Name: "web"}: {}}}
	third := Build(store, testOpts, second, vsReq)
	if vs := third.VirtualServiceFor("client", hostname("app", "web")); vs != nil {
		t.Errorf("deleted VirtualService %s still applies", vs)
	}
	if third.BuildInfo().Full {
		t.Error("a VirtualService change forced a full rebuild")
	}
}

// TestRoutesDependOnSourceLabels asserts that routes count as per-proxy
// exactly where a visible VirtualService matches on its source.
func TestRoutesDependOnSourceLabels(t *testing.T) {
	store := model.NewStore()
	store.UpsertConfig(vsConfig("app", "by-source", 0, &networking.VirtualService{
		Hosts:    []string{"web"},
		ExportTo: []string{"."},
		Http: []*networking.HTTPRoute{{
			Match: []*networking.HTTPMatchRequest{{SourceLabels: map[string]string{"app": "canary"}}},
			Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "web"}}},
		}},
	}))
	pc := Build(store, testOpts, nil, nil)
	if !pc.RoutesDependOnSourceLabels("app") {
		t.Error("routes in app do not depend on source labels, but its VirtualService matches on them")
	}
	if pc.RoutesDependOnSourceLabels("client") {
		t.Error("routes in client depend on source labels, but it sees no VirtualService")
	}
}
