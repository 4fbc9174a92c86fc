package pushcontext

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func TestServicesVisibleTo(t *testing.T) {
	tests := []struct {
		name     string
		services []*model.Service
		// want maps a querying namespace to the hostnames it must see.
		want map[string][]string
	}{
		{
			name: "nil and star are public",
			services: []*model.Service{
				newService("a", "nil-export", nil),
				newService("b", "star", model.ExportTo{"*"}),
			},
			want: map[string][]string{
				"a":     {hostname("a", "nil-export"), hostname("b", "star")},
				"other": {hostname("a", "nil-export"), hostname("b", "star")},
			},
		},
		{
			name: "dot (resolved or literal) is the own namespace only",
			services: []*model.Service{
				newService("a", "resolved", model.ExportTo{"a"}),
				newService("a", "literal", model.ExportTo{"."}),
				newService("b", "public", nil),
			},
			want: map[string][]string{
				"a": {hostname("a", "literal"), hostname("a", "resolved"), hostname("b", "public")},
				"b": {hostname("b", "public")},
			},
		},
		{
			name: "tilde hides from everyone, the own namespace too",
			services: []*model.Service{
				newService("a", "empty", model.ExportTo{}),
				newService("a", "literal-tilde", model.ExportTo{"~"}),
				newService("a", "public", nil),
			},
			want: map[string][]string{
				"a": {hostname("a", "public")},
				"b": {hostname("a", "public")},
			},
		},
		{
			name: "named namespaces, listed twice, mixed with public",
			services: []*model.Service{
				newService("a", "to-b-c", model.ExportTo{"b", "c", "b"}),
				newService("z", "to-c", model.ExportTo{"c"}),
				newService("m", "public", nil),
			},
			want: map[string][]string{
				"a": {hostname("m", "public")},
				"b": {hostname("m", "public"), hostname("a", "to-b-c")},
				"c": {hostname("m", "public"), hostname("a", "to-b-c"), hostname("z", "to-c")},
				"d": {hostname("m", "public")},
			},
		},
		{
			name: "star among names is public",
			services: []*model.Service{
				newService("a", "star-and-name", model.ExportTo{"b", "*"}),
			},
			want: map[string][]string{
				"x": {hostname("a", "star-and-name")},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := model.NewStore()
			for _, svc := range tt.services {
				store.UpsertService(svc)
			}
			pc := Build(store, testOpts, nil, nil)
			for ns, want := range tt.want {
				got := hostnames(pc.ServicesVisibleTo(ns))
				wantSorted := sortedCopy(want)
				if diff := cmp.Diff(wantSorted, got); diff != "" {
					t.Errorf("ServicesVisibleTo(%q) (-want +got):\n%s", ns, diff)
				}
				// Cross-check against the model's own rule, service by service.
				for _, svc := range pc.Services() {
					visible := contains(got, svc.Hostname)
					if allowed := allowedTo(svc, ns); visible != allowed {
						t.Errorf("%s visible to %q = %v, ExportTo %v allows = %v", svc.Hostname, ns, visible, svc.ExportTo, allowed)
					}
				}
			}
		})
	}
}

// allowedTo is the model's visibility rule with "." read as the own namespace.
func allowedTo(svc *model.Service, ns string) bool {
	if svc.ExportTo.Allows(ns) {
		return true
	}
	for _, e := range svc.ExportTo {
		if e == "." && ns == svc.Namespace {
			return true
		}
	}
	return false
}

func TestServicesVisibleToSharesPublicList(t *testing.T) {
	store := model.NewStore()
	store.UpsertService(newService("a", "public", nil))
	store.UpsertService(newService("a", "private", model.ExportTo{"a"}))
	pc := Build(store, testOpts, nil, nil)

	if got := testing.AllocsPerRun(100, func() { _ = pc.ServicesVisibleTo("unrelated") }); got != 0 {
		t.Errorf("ServicesVisibleTo allocates %v times per call, want 0", got)
	}
	if got := testing.AllocsPerRun(100, func() { _ = pc.ServicesVisibleTo("a") }); got != 0 {
		t.Errorf("ServicesVisibleTo for a restricted namespace allocates %v times per call, want 0", got)
	}
	x, y := pc.ServicesVisibleTo("x"), pc.ServicesVisibleTo("y")
	if &x[0] != &y[0] {
		t.Error("namespaces without restricted services should share one public list")
	}
	if len(pc.services.restricted) != 1 {
		t.Errorf("per-namespace lists = %d, want 1 (only namespace a sees a restricted service)", len(pc.services.restricted))
	}
}

func TestServiceLookups(t *testing.T) {
	store := model.NewStore()
	for _, svc := range []*model.Service{newService("b", "two", nil), newService("a", "one", nil), newService("c", "three", nil)} {
		store.UpsertService(svc)
	}
	store.UpsertService(&model.Service{Name: "nohost", Namespace: "a"})
	pc := Build(store, testOpts, nil, nil)

	tests := []struct {
		host, ns, name string
		want           bool
	}{
		{host: hostname("a", "one"), ns: "a", name: "one", want: true},
		{host: hostname("b", "two"), ns: "b", name: "two", want: true},
		{host: hostname("a", "two"), ns: "a", name: "two", want: false},
		{host: "", ns: "a", name: "nohost", want: false},
	}
	for _, tt := range tests {
		byHost := pc.ServiceForHostname(tt.host)
		byName := pc.ServiceByName(tt.ns, tt.name)
		if (byHost != nil) != tt.want || (byName != nil) != tt.want {
			t.Errorf("lookup %s / %s/%s: byHost=%v byName=%v, want found=%v", tt.host, tt.ns, tt.name, byHost, byName, tt.want)
			continue
		}
		if tt.want && (byHost != byName || byHost.Hostname != tt.host) {
			t.Errorf("lookup %s: byHost=%p byName=%p disagree", tt.host, byHost, byName)
		}
	}
	want := []string{hostname("a", "one"), hostname("c", "three"), hostname("b", "two")}
	if diff := cmp.Diff(sortedCopy(want), hostnames(pc.Services())); diff != "" {
		t.Errorf("Services() (-want +got):\n%s", diff)
	}
	problems := pc.Summary().Problems
	if len(problems) != 1 || problems[0].Name != "nohost" {
		t.Errorf("problems = %+v, want one for the service without hostname", problems)
	}
}

// TestExternalNameServices: a name proxies can resolve keeps its service
// (absolute names, and names in upper case, as DNS ignores case); any other is reported on the Service and leaves it
// out of every lookup, so no generator refers to a host it cannot reach.
func TestExternalNameServices(t *testing.T) {
	external := func(name, externalName string) *model.Service {
		svc := newService("app", name, nil)
		svc.ExternalName = externalName
		return svc
	}
	store := model.NewStore()
	for _, svc := range []*model.Service{
		external("billing", "billing.example.com"),
		external("absolute", "api.example.com."),
		external("with-port", "billing.example.com:443"),
		external("url", "https://billing.example.com"),
		external("upper", "Billing.Example.com"),
		external("not-utf8", "bill\xffing.example.com"),
	} {
		store.UpsertService(svc)
	}
	pc := Build(store, testOpts, nil, nil)

	want := []string{hostname("app", "absolute"), hostname("app", "billing"), hostname("app", "upper")}
	if diff := cmp.Diff(want, hostnames(pc.ServicesVisibleTo("app"))); diff != "" {
		t.Errorf("visible services (-want +got):\n%s", diff)
	}
	for _, name := range []string{"with-port", "url", "not-utf8"} {
		if pc.ServiceByName("app", name) != nil || pc.ServiceForHostname(hostname("app", name)) != nil {
			t.Errorf("service %s found, want it left out", name)
		}
	}
	var reported []string
	for _, p := range pc.Summary().Problems {
		if p.Kind != model.KindService.String() || !strings.Contains(p.Message, "is not a DNS name") {
			t.Errorf("unexpected problem %+v", p)
		}
		reported = append(reported, p.Name)
	}
	if diff := cmp.Diff([]string{"not-utf8", "url", "with-port"}, reported); diff != "" {
		t.Errorf("reported services (-want +got):\n%s", diff)
	}
}
