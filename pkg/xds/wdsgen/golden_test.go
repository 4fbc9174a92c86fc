package wdsgen

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
	"github.com/meshpilot/meshpilot/pkg/workloadapi"
)

// fixture is a golden case's input: model objects in YAML (field names as
// in the model, any case), and what the node proxy subscribes to.
type fixture struct {
	Namespaces []*model.Namespace `json:"namespaces"`
	Services   []*model.Service   `json:"services"`
	Workloads  []*model.Workload  `json:"workloads"`
	// Slices are EndpointSlices' endpoints, by service.
	Slices []fixtureSlice `json:"slices"`
	// Names subscribes to those names; none means a wildcard.
	Names []string `json:"names"`
}

type fixtureSlice struct {
	// Service is "<namespace>/<name>".
	Service string `json:"service"`
	// Name tells a service's slices apart; "<service>-slice" if empty.
	Name      string            `json:"name"`
	Endpoints []*model.Endpoint `json:"endpoints"`
}

type goldenResource struct {
	Name    string          `json:"name"`
	Aliases []string        `json:"aliases,omitempty"`
	Address json.RawMessage `json:"address"`
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
			push := Build(f)
			w := &model.WatchedResource{TypeURL: AddressType, ResourceNames: f.Names, Wildcard: len(f.Names) == 0}
			res, err := New(Options{}).Addresses.Generate(&model.Proxy{Type: model.NodeProxy}, push, w, &model.PushRequest{Full: true})
			if err != nil {
				t.Fatal(err)
			}
			out := make([]goldenResource, 0, len(res))
			for _, r := range res {
				out = append(out, goldenResource{Name: r.Name, Aliases: r.Aliases, Address: readable(t, r)})
			}
			got, err := yaml.Marshal(out)
			if err != nil {
				t.Fatal(err)
			}
			xdstest.Golden(t, filepath.Join("testdata", name+".out.yaml"), got)
		})
	}
}

func loadFixture(t *testing.T, path string) fixture {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f fixture
	if err := yaml.UnmarshalStrict(raw, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f
}

// Build stores the fixture and builds its push context.
func Build(f fixture) *pushcontext.PushContext {
	store := model.NewStore()
	for _, ns := range f.Namespaces {
		store.UpsertNamespace(ns)
	}
	for _, svc := range f.Services {
		if svc.Hostname == "" {
			svc.Hostname = svc.Name + "." + svc.Namespace + ".svc.cluster.local"
		}
		store.UpsertService(svc)
	}
	for _, w := range f.Workloads {
		store.UpsertWorkload(w)
	}
	for _, sl := range f.Slices {
		ns, name, _ := strings.Cut(sl.Service, "/")
		sliceName := cmp.Or(sl.Name, name+"-slice")
		store.SetEndpoints(model.NamespacedName{Namespace: ns, Name: name}, sliceName, sl.Endpoints)
	}
	return pushcontext.Build(store, pushcontext.Options{}, nil, nil)
}

// readable renders an Address as JSON with IP addresses as text (the wire
// has bytes), so the goldens can be read and reviewed.
func readable(t *testing.T, r model.Resource) json.RawMessage {
	t.Helper()
	a := &workloadapi.Address{}
	if err := proto.Unmarshal(r.Resource.GetValue(), a); err != nil {
		t.Fatal(err)
	}
	b, err := protojson.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	b, err = json.Marshal(ipsAsText(v, ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ipsAsText(v any, key string) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = ipsAsText(e, k)
		}
	case []any:
		for i, e := range x {
			x[i] = ipsAsText(e, key)
		}
	case string:
		if key == "address" || key == "addresses" {
			if b, err := base64.StdEncoding.DecodeString(x); err == nil {
				if ip, ok := netip.AddrFromSlice(b); ok {
					return ip.String()
				}
			}
		}
	}
	return v
}
