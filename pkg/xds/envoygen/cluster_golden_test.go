package envoygen

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// clusterTestProxy is a `kind: TestProxy` document of a cluster golden
// input. A case may hold several, to show how one store looks to each.
type clusterTestProxy struct {
	Kind      string            `json:"kind"`
	Name      string            `json:"name"` // labels the proxy's section of the output
	Type      string            `json:"type"` // sidecar (default) or router
	Namespace string            `json:"namespace"`
	IPs       []string          `json:"ips"`
	Labels    map[string]string `json:"labels"`
	Locality  string            `json:"locality"` // region/zone/subzone
	Request   struct {
		// Clusters lists explicit CDS names; omitted means a wildcard
		// subscription, which is what Envoy sends.
		Clusters []string `json:"clusters"`
		// Endpoints lists EDS names; omitted means the EDS clusters of the
		// CDS response, which is what Envoy asks for.
		Endpoints []string `json:"endpoints"`
	} `json:"request"`
}

var clusterDocSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

type clusterFixture struct {
	store   model.Store
	proxies []clusterTestProxy
}

func loadClusterFixture(t testing.TB, path string) clusterFixture {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var kube []string
	var proxies []clusterTestProxy
	for _, doc := range clusterDocSeparator.Split(string(raw), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if head.Kind != "TestProxy" {
			kube = append(kube, doc)
			continue
		}
		var p clusterTestProxy
		if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
			t.Fatalf("%s: TestProxy: %v", path, err)
		}
		proxies = append(proxies, p)
	}
	if len(proxies) == 0 {
		t.Fatalf("%s: no TestProxy document", path)
	}
	return clusterFixture{store: xdstest.Store(t, strings.Join(kube, "\n---\n")), proxies: proxies}
}

func (p clusterTestProxy) model() *model.Proxy {
	nodeType := model.SidecarProxy
	if p.Type == string(model.Router) {
		nodeType = model.Router
	}
	ip := ""
	if len(p.IPs) > 0 {
		ip = p.IPs[0]
	}
	parts := strings.SplitN(p.Locality, "/", 3)
	for len(parts) < 3 {
		parts = append(parts, "")
	}
	return &model.Proxy{
		ID:          string(nodeType) + "~" + ip + "~" + p.Name + "." + p.Namespace + "~" + p.Namespace + ".svc.cluster.local",
		Type:        nodeType,
		IPAddresses: p.IPs,
		Namespace:   p.Namespace,
		DNSDomain:   p.Namespace + ".svc.cluster.local",
		Labels:      p.Labels,
		Locality:    model.Locality{Region: parts[0], Zone: parts[1], SubZone: parts[2]},
	}
}

// clusterGoldenProxy is one proxy's section of testdata/clusters/<case>.out.yaml.
type clusterGoldenProxy struct {
	Proxy     string            `json:"proxy"`
	Clusters  []json.RawMessage `json:"clusters"`
	Endpoints []json.RawMessage `json:"endpoints"`
}

type clusterGoldenOutput struct {
	Proxies []clusterGoldenProxy `json:"proxies"`
	// Problems are the push context's translation problems; Warnings the
	// log lines, one per problem and push.
	Problems []string `json:"problems,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

func TestClusterGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/clusters/*.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) == 0 {
		t.Fatal("no golden cases")
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			got := runClusterGolden(t, loadClusterFixture(t, in))
			xdstest.Golden(t, filepath.Join("testdata", "clusters", name+".out.yaml"), got)
		})
	}
}

func clusterTestLogger(buf *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
}

func runClusterGolden(t *testing.T, f clusterFixture) []byte {
	t.Helper()
	var logs bytes.Buffer
	opts := Options{Logger: clusterTestLogger(&logs)}
	push := pushcontext.Build(f.store, pushcontext.Options{DomainSuffix: "cluster.local", RootNamespace: "istio-system"}, nil, nil)
	cds, eds := NewClusterGenerator(opts), NewEndpointGenerator(opts)
	var doc clusterGoldenOutput
	for _, tp := range f.proxies {
		proxy := tp.model()
		cw := &model.WatchedResource{TypeURL: ClusterType, Wildcard: tp.Request.Clusters == nil, ResourceNames: sortedNames(tp.Request.Clusters)}
		clusters := clusterGenerateTwice(t, cds, proxy, push, cw)
		checkClusterResources(t, ClusterType, cw, clusters)

		ew := &model.WatchedResource{TypeURL: EndpointType, ResourceNames: sortedNames(tp.Request.Endpoints)}
		if tp.Request.Endpoints == nil {
			ew.ResourceNames = edsClusterNames(t, clusters)
		}
		endpoints := clusterGenerateTwice(t, eds, proxy, push, ew)
		checkClusterResources(t, EndpointType, ew, endpoints)
		doc.Proxies = append(doc.Proxies, clusterGoldenProxy{
			Proxy:     tp.Name,
			Clusters:  renderClusterResources(t, clusters),
			Endpoints: renderClusterResources(t, endpoints),
		})
	}
	for _, p := range push.Summary().TranslationProblems {
		doc.Problems = append(doc.Problems, p.Kind+" "+p.Namespace+"/"+p.Name+": "+p.Message)
	}
	for line := range strings.Lines(logs.String()) {
		doc.Warnings = append(doc.Warnings, strings.TrimSpace(line))
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	out, err := yaml.JSONToYAML(js)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// edsClusterNames lists the EDS clusters of a CDS response, sorted.
func edsClusterNames(t *testing.T, clusters model.Resources) []string {
	t.Helper()
	names := []string{}
	for _, r := range clusters {
		var c cluster.Cluster
		if err := r.Resource.UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		if c.GetType() == cluster.Cluster_EDS {
			names = append(names, c.GetEdsClusterConfig().GetServiceName())
		}
	}
	slices.Sort(names)
	return names
}

// checkClusterResources asserts what holds for every CDS and EDS response:
// unique names that match the resources, only requested names unless
// wildcard, and every resource valid for Envoy, Any fields included.
func checkClusterResources(t *testing.T, typeURL string, w *model.WatchedResource, res model.Resources) {
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
		var name string
		switch m := msg.(type) {
		case *cluster.Cluster:
			name = m.GetName()
		case *endpoint.ClusterLoadAssignment:
			name = m.GetClusterName()
		}
		if name != r.Name {
			t.Errorf("%s: resource %q carries name %q", typeURL, r.Name, name)
		}
		if err := xdstest.ValidateDeep(msg); err != nil {
			t.Errorf("%s: %s fails validation: %v", typeURL, r.Name, err)
		}
	}
}

// clusterGenerateTwice generates, then again from the caches, which must
// give the same resources.
func clusterGenerateTwice(t *testing.T, g Generator, proxy *model.Proxy, push *pushcontext.PushContext, w *model.WatchedResource) model.Resources {
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

func sortedNames(s []string) []string {
	if s == nil {
		return nil
	}
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func renderClusterResources(t *testing.T, res model.Resources) []json.RawMessage {
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
