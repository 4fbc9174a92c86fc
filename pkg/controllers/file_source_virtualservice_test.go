package controllers

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apinetworking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// vsRoutes summarizes the stored VirtualServices as
// "ns/name=host>destination/subset[,...]": each host, then where the first
// HTTP route sends it.
func vsRoutes(store model.Store) []string {
	var out []string
	for _, c := range store.Configs(model.KindVirtualService) {
		spec := c.Spec.(*apinetworking.VirtualService)
		var dests []string
		for _, r := range spec.GetHttp() {
			for _, d := range r.GetRoute() {
				dests = append(dests, d.GetDestination().GetHost()+"/"+d.GetDestination().GetSubset())
			}
			break
		}
		out = append(out, c.Namespace+"/"+c.Name+"="+strings.Join(spec.GetHosts(), ",")+">"+strings.Join(dests, ","))
	}
	slices.Sort(out)
	return out
}

const drForVirtualServiceTests = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\n" +
	"metadata: {name: echo, namespace: demo}\nspec: {host: echo, subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]}\n"

func virtualServiceYAML(apiVersion, name, spec string) string {
	return "apiVersion: networking.istio.io/" + apiVersion + "\nkind: VirtualService\nmetadata: {name: " + name +
		", namespace: demo}\nspec: " + spec + "\n"
}

func TestFileSourceVirtualServices(t *testing.T) {
	toV2 := `{hosts: [echo.demo.svc.cluster.local], http: [{route: [{destination: {host: echo.demo.svc.cluster.local, subset: v2}}]}]}`
	cases := []struct {
		name string
		docs []string
		// want is vsRoutes of the store; the DestinationRule beside them
		// must always load.
		want []string
		// wantErrors counts rejected VirtualServices by reason.
		wantErrors map[string]float64
		wantLog    []string
	}{
		{
			name: "v1, v1beta1 and v1alpha3",
			docs: []string{
				virtualServiceYAML("v1", "a", toV2),
				virtualServiceYAML("v1beta1", "b", `{hosts: [b], http: [{route: [{destination: {host: echo, subset: v1}, weight: 80}, {destination: {host: echo, subset: v2}, weight: 20}]}]}`),
				virtualServiceYAML("v1alpha3", "c", `{hosts: [c], tcp: [{route: [{destination: {host: echo}}]}]}`),
			},
			want: []string{"demo/a=echo.demo.svc.cluster.local>echo.demo.svc.cluster.local/v2", "demo/b=b>echo/v1,echo/v2", "demo/c=c>"},
		},
		{
			name: "invalid ones are skipped with their field paths, the valid ones load",
			docs: []string{
				virtualServiceYAML("v1", "ok", toV2),
				virtualServiceYAML("v1", "nohosts", `{http: [{route: [{destination: {host: echo}}]}]}`),
				virtualServiceYAML("v1", "badsubset", `{hosts: [echo], http: [{route: [{destination: {host: echo, subset: V_2}}]}]}`),
				virtualServiceYAML("v1", "twoactions", `{hosts: [echo], http: [{route: [{destination: {host: echo}}], redirect: {uri: /x}}]}`),
			},
			want:       []string{"demo/ok=echo.demo.svc.cluster.local>echo.demo.svc.cluster.local/v2"},
			wantErrors: map[string]float64{ReasonInvalid: 3},
			wantLog: []string{"name=nohosts", "spec.hosts: at least one host is required",
				"name=badsubset", "spec.http[0].route[0].destination.subset",
				"name=twoactions", "spec.http[0]: route and redirect are mutually exclusive"},
		},
		{
			name: "unknown fields and wrong types do not decode, with their lines",
			docs: []string{
				virtualServiceYAML("v1", "typo", `{hosts: [echo], http: [{route: [{destination: {host: echo, subest: v2}}]}]}`),
				virtualServiceYAML("v1", "weight", `{hosts: [echo], http: [{route: [{destination: {host: echo}, weight: heavy}]}]}`),
			},
			wantErrors: map[string]float64{ReasonDecode: 2},
			// Each document is four lines and a separator; the spec is on
			// its fourth.
			wantLog: []string{"line 4: spec.http[0].route[0].destination.subest: unknown field (did you mean subset?)",
				`line 9: spec.http[0].route[0].weight: want an integer, got \"heavy\"`},
		},
		{
			name: "the same VirtualService twice, across versions",
			docs: []string{
				virtualServiceYAML("v1", "twice", toV2),
				virtualServiceYAML("v1beta1", "twice", `{hosts: [other], http: [{route: [{destination: {host: other}}]}]}`),
			},
			want:       []string{"demo/twice=echo.demo.svc.cluster.local>echo.demo.svc.cluster.local/v2"},
			wantErrors: map[string]float64{ReasonDuplicate: 1},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "dr.yaml", drForVirtualServiceTests)
			writeFile(t, dir, "vs.yaml", strings.Join(tc.docs, "---\n"))
			h := startFileSource(t, dir)

			if diff := cmp.Diff(tc.want, vsRoutes(h.store)); diff != "" {
				t.Errorf("VirtualServices (-want +got)\n%s\nlogs:\n%s", diff, h.logs)
			}
			if diff := cmp.Diff([]string{"demo/echo=echo"}, drHosts(h.store)); diff != "" {
				t.Errorf("destination rules (-want +got)\n%s", diff)
			}
			h.checkReported(t, "VirtualService", tc.wantErrors, tc.wantLog)
			var rejected int
			for _, p := range h.store.SourceProblems() {
				if p.Kind == "VirtualService" {
					rejected++
				}
			}
			var wantRejected int
			for _, n := range tc.wantErrors {
				wantRejected += int(n)
			}
			if rejected != wantRejected {
				t.Errorf("%d VirtualService problems in the store, want %d: %+v", rejected, wantRejected, h.store.SourceProblems())
			}
		})
	}
}

// TestFileSourceVirtualServiceChanges edits a VirtualService file: an edit
// that breaks it withdraws it, fixing it restores it, and removing the
// file deletes it, without touching the DestinationRule beside it.
func TestFileSourceVirtualServiceChanges(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "dr.yaml", drForVirtualServiceTests)
	route := func(subset string) string {
		return virtualServiceYAML("v1", "echo", `{hosts: [echo], http: [{route: [{destination: {host: echo, subset: "`+subset+`"}}]}]}`)
	}
	writeFile(t, dir, "vs.yaml", route("v2"))
	h := startFileSource(t, dir)
	if diff := cmp.Diff([]string{"demo/echo=echo>echo/v2"}, vsRoutes(h.store)); diff != "" {
		t.Fatalf("initial (-want +got)\n%s", diff)
	}

	writeFile(t, dir, "vs.yaml", route("v1"))
	eventually(t, "edit applied", func() bool { return slices.Equal(vsRoutes(h.store), []string{"demo/echo=echo>echo/v1"}) })

	writeFile(t, dir, "vs.yaml", route("Not_A_Label"))
	eventually(t, "broken edit withdraws the VirtualService", func() bool {
		return len(vsRoutes(h.store)) == 0 && h.errorCount("VirtualService", ReasonInvalid) == 1
	})

	writeFile(t, dir, "vs.yaml", route("v2"))
	eventually(t, "fixed VirtualService restored", func() bool { return slices.Equal(vsRoutes(h.store), []string{"demo/echo=echo>echo/v2"}) })

	if err := os.Remove(filepath.Join(dir, "vs.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "file removed", func() bool { return len(vsRoutes(h.store)) == 0 })
	if diff := cmp.Diff([]string{"demo/echo=echo"}, drHosts(h.store)); diff != "" {
		t.Errorf("destination rules (-want +got)\n%s", diff)
	}
}
