package grpcgen

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// goldenOutput is the document written to testdata/<case>.out.yaml.
type goldenOutput struct {
	Listeners []json.RawMessage `json:"listeners"`
	Routes    []json.RawMessage `json:"routes"`
	Clusters  []json.RawMessage `json:"clusters"`
	Endpoints []json.RawMessage `json:"endpoints"`
	Warnings  []string          `json:"warnings,omitempty"`
}

func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) == 0 {
		t.Fatal("no golden cases")
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			f := loadFixture(t, in)
			got := runGolden(t, f)
			xdstest.Golden(t, filepath.Join("testdata", name+".out.yaml"), got)
		})
	}
}

// runGolden generates all four types for the fixture's proxy, checks every
// resource, and renders the result as YAML.
func runGolden(t *testing.T, f fixture) []byte {
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
	push := pushcontext.Build(f.store(t), testPushOptions(), nil, nil)
	proxy := f.proxy()
	set := New(Options{Logger: logger})
	requests := []struct {
		typeURL string
		names   []string
		gen     Generator
		out     *[]json.RawMessage
	}{
		{ListenerType, f.Request.Listeners, set.Listeners, nil},
		{RouteType, f.Request.Routes, set.Routes, nil},
		{ClusterType, f.Request.Clusters, set.Clusters, nil},
		{EndpointType, f.Request.Endpoints, set.Endpoints, nil},
	}
	var doc goldenOutput
	requests[0].out, requests[1].out, requests[2].out, requests[3].out = &doc.Listeners, &doc.Routes, &doc.Clusters, &doc.Endpoints

	for _, r := range requests {
		names := slices.Clone(r.names)
		slices.Sort(names)
		w := &model.WatchedResource{TypeURL: r.typeURL, ResourceNames: names, Wildcard: f.Request.Wildcard}
		full := &model.PushRequest{Full: true}
		first, err := r.gen.Generate(proxy, push, w, full)
		if err != nil {
			t.Fatalf("%s: %v", r.typeURL, err)
		}
		checkResources(t, r.typeURL, w, first)
		// A second call is served from the caches and must say the same.
		// Only the first call's warnings go into the golden file.
		logged := logs.Len()
		again, err := r.gen.Generate(proxy, push, w, full)
		logs.Truncate(logged)
		if err != nil {
			t.Fatalf("%s (cached): %v", r.typeURL, err)
		}
		if diff := cmp.Diff(first, again, cmp.Comparer(proto.Equal)); diff != "" {
			t.Errorf("%s: second generation differs:\n%s", r.typeURL, diff)
		}
		*r.out = []json.RawMessage{}
		for _, res := range first {
			js, err := protojson.Marshal(res.Resource)
			if err != nil {
				t.Fatal(err)
			}
			*r.out = append(*r.out, js)
		}
	}
	for line := range strings.Lines(logs.String()) {
		doc.Warnings = append(doc.Warnings, strings.TrimSpace(line))
	}
	return renderGolden(t, doc)
}

// renderGolden writes the sections in subscription order (a map would sort them).
func renderGolden(t *testing.T, doc goldenOutput) []byte {
	t.Helper()
	var out bytes.Buffer
	sections := []struct {
		name  string
		value any
	}{
		{"listeners", doc.Listeners}, {"routes", doc.Routes}, {"clusters", doc.Clusters},
		{"endpoints", doc.Endpoints}, {"warnings", doc.Warnings},
	}
	for _, s := range sections {
		if s.name == "warnings" && len(doc.Warnings) == 0 {
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

// checkResources asserts what must hold for any generator output: names are
// unique and match the resource, only requested names appear (unless
// wildcard), and each resource passes Envoy's validation and grpc-go's rules.
func checkResources(t *testing.T, typeURL string, w *model.WatchedResource, res model.Resources) {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range res {
		if seen[r.Name] {
			t.Errorf("%s: %s returned twice", typeURL, r.Name)
		}
		seen[r.Name] = true
		if !w.Wildcard && !slices.Contains(w.ResourceNames, r.Name) {
			t.Errorf("%s: %s was not requested", typeURL, r.Name)
		}
		if r.Resource.GetTypeUrl() != typeURL {
			t.Errorf("%s: %s has type %s", typeURL, r.Name, r.Resource.GetTypeUrl())
		}
		msg, err := r.Resource.UnmarshalNew()
		if err != nil {
			t.Fatalf("%s: %s: %v", typeURL, r.Name, err)
		}
		if got := resourceName(msg); got != r.Name {
			t.Errorf("%s: resource %q carries name %q", typeURL, r.Name, got)
		}
		if err := xdstest.ValidateDeep(msg); err != nil {
			t.Errorf("%s: %s fails validation: %v", typeURL, r.Name, err)
		}
		if err := grpcAccepts(msg); err != nil {
			t.Errorf("%s: grpc-go would reject: %v", typeURL, err)
		}
	}
}
