package pushcontext

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func externalService(ns, name, externalName string, exportTo model.ExportTo) *model.Service {
	svc := newService(ns, name, exportTo)
	svc.ExternalName = externalName
	return svc
}

// TestAliasResolution: an ExternalName Service that names a Service of the
// mesh (however its name is spelled) is an alias of it, through chains of
// aliases too, wherever the proxy sees the target; a name outside the mesh,
// of a missing Service, or in a loop, leaves a DNS service, and a loop is
// reported.
func TestAliasResolution(t *testing.T) {
	reviews := hostname("app", "reviews")
	store := model.NewStore()
	for _, svc := range []*model.Service{
		newService("app", "reviews", nil),
		newService("app", "private", model.ExportTo{"app"}),
		externalService("app", "alias", reviews, nil),
		externalService("app", "chain", hostname("app", "alias"), nil),
		externalService("app", "chain2", hostname("app", "chain")+".", nil),
		externalService("web", "other-ns", reviews, nil),
		externalService("web", "spelled", "Reviews.APP.svc.Cluster.Local.", nil),
		externalService("app", "missing", hostname("app", "gone"), nil),
		externalService("app", "outside", "reviews.example.com", nil),
		externalService("app", "short", "reviews.app", nil),
		externalService("app", "self", hostname("app", "self"), nil),
		externalService("app", "loop-a", hostname("app", "loop-b"), nil),
		externalService("app", "loop-b", hostname("app", "loop-a"), nil),
		externalService("app", "into-loop", hostname("app", "loop-a"), nil),
		externalService("app", "to-private", hostname("app", "private"), nil),
		externalService("app", "hidden", reviews, model.ExportTo{"app"}),
	} {
		store.UpsertService(svc)
	}
	pc := Build(store, testOpts, nil, nil)

	tests := []struct {
		name, ns string // the ExternalName Service and the proxy's namespace
		want     string // the target's hostname, "" for a DNS service
	}{
		{name: "alias", ns: "app", want: reviews},
		{name: "alias", ns: "elsewhere", want: reviews},
		{name: "chain", ns: "app", want: reviews},
		{name: "chain2", ns: "app", want: reviews},
		{name: "other-ns", ns: "web", want: reviews},
		{name: "spelled", ns: "web", want: reviews},
		{name: "missing", ns: "app"},
		{name: "outside", ns: "app"},
		// Cluster DNS does not expand a CNAME's target with search domains.
		{name: "short", ns: "app"},
		{name: "self", ns: "app"},
		{name: "loop-a", ns: "app"},
		{name: "loop-b", ns: "app"},
		{name: "into-loop", ns: "app"},
		{name: "to-private", ns: "app", want: hostname("app", "private")},
		// A namespace that does not see the target cannot route to it.
		{name: "to-private", ns: "web"},
	}
	for _, tt := range tests {
		svc := findService(t, pc, tt.name)
		got := ""
		if target := pc.AliasTarget(tt.ns, svc); target != nil {
			got = target.Hostname
		}
		if got != tt.want {
			t.Errorf("AliasTarget(%q, %s) = %q, want %q", tt.ns, tt.name, got, tt.want)
		}
	}
	if pc.AliasTarget("app", findService(t, pc, "reviews")) != nil {
		t.Error("a Service without an external name is no alias")
	}

	aliasesOf := func(ns, name string) []string { return hostnames(pc.AliasesOf(ns, findService(t, pc, name))) }
	wantReviews := []string{hostname("app", "alias"), hostname("app", "chain"), hostname("app", "chain2"),
		hostname("app", "hidden"), hostname("web", "other-ns"), hostname("web", "spelled")}
	if diff := cmp.Diff(wantReviews, aliasesOf("app", "reviews")); diff != "" {
		t.Errorf("AliasesOf(app, reviews) (-want +got):\n%s", diff)
	}
	// Only the aliases a namespace sees join the target's names there.
	wantWeb := []string{hostname("app", "alias"), hostname("app", "chain"), hostname("app", "chain2"),
		hostname("web", "other-ns"), hostname("web", "spelled")}
	if diff := cmp.Diff(wantWeb, aliasesOf("web", "reviews")); diff != "" {
		t.Errorf("AliasesOf(web, reviews) (-want +got):\n%s", diff)
	}
	if got := aliasesOf("app", "alias"); len(got) != 0 {
		t.Errorf("AliasesOf(alias) = %v: an alias's aliases belong to its target", got)
	}

	// Every hostname a resolution looked up names the aliases it may change
	// (a Service's own hostname is no lookup: a change of it is its own).
	reading := func(host string) []string { return hostnames(pc.AliasesReading(host)) }
	for host, want := range map[string][]string{
		reviews:                   wantReviews,
		hostname("app", "alias"):  {hostname("app", "chain"), hostname("app", "chain2")},
		hostname("app", "gone"):   {hostname("app", "missing")},
		hostname("app", "loop-a"): {hostname("app", "into-loop"), hostname("app", "loop-b")},
	} {
		if diff := cmp.Diff(want, reading(host)); diff != "" {
			t.Errorf("AliasesReading(%s) (-want +got):\n%s", host, diff)
		}
	}

	var loops []string
	for _, p := range pc.Summary().Problems {
		if strings.Contains(p.Message, "leads back to") {
			loops = append(loops, p.Name)
		}
	}
	if diff := cmp.Diff([]string{"into-loop", "loop-a", "loop-b", "self"}, loops); diff != "" {
		t.Errorf("loops reported (-want +got):\n%s", diff)
	}
}

// TestAliasChainBounded: a chain longer than cluster DNS would follow is a
// DNS service, reported, however long the configuration makes it.
func TestAliasChainBounded(t *testing.T) {
	store := model.NewStore()
	store.UpsertService(newService("app", "end", nil))
	prev := "end"
	for i := 0; i <= maxAliasHops; i++ {
		name := "hop" + string(rune('a'+i))
		store.UpsertService(externalService("app", name, hostname("app", prev), nil))
		prev = name
	}
	pc := Build(store, testOpts, nil, nil)
	if got := pc.AliasTarget("app", findService(t, pc, "hopa")); got == nil {
		t.Error("a one-hop alias did not resolve")
	}
	if got := pc.AliasTarget("app", findService(t, pc, prev)); got != nil {
		t.Errorf("a chain of %d hops resolved to %s", maxAliasHops+1, got.Hostname)
	}
}

func findService(t *testing.T, pc *PushContext, name string) *model.Service {
	t.Helper()
	for _, svc := range pc.Services() {
		if svc.Name == name {
			return svc
		}
	}
	t.Fatalf("no service %s", name)
	return nil
}
