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
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/testcerts"
	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// A golden input (testdata/<kind>/<case>.in.yaml) is a stream of YAML
// documents: Kubernetes objects for the store, one or more `kind: TestProxy`
// documents saying who connects and what it asks for, and any number of
// `kind: TestCertificate` documents, each turned into a kubernetes.io/tls
// Secret holding a certificate generated for the run.

// testProxy is a `kind: TestProxy` document. Each golden harness reads the
// request fields of its own xDS types and ignores the rest.
type testProxy struct {
	Kind      string            `json:"kind"`
	Name      string            `json:"name"` // optional; labels the proxy's output section and its node ID
	Type      string            `json:"type"` // sidecar (default) or router
	Namespace string            `json:"namespace"`
	IPs       []string          `json:"ips"`
	Labels    map[string]string `json:"labels"`
	Locality  string            `json:"locality"` // region/zone/subzone
	// Request lists the resource names the proxy subscribes to. An omitted
	// list means what Envoy would ask for: a wildcard for CDS and LDS, and
	// the names the CDS or LDS response refers to for EDS and RDS.
	Request struct {
		Clusters  []string `json:"clusters"`
		Endpoints []string `json:"endpoints"`
		Listeners []string `json:"listeners"`
		Routes    []string `json:"routes"`
	} `json:"request"`
}

// testCertificate is a `kind: TestCertificate` document.
type testCertificate struct {
	Kind      string   `json:"kind"`
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Hosts     []string `json:"hosts"`
}

type generatedPEM struct{ cert, key []byte }

// selfSignedPEM is testcerts.SelfSigned in the shape the fixtures keep.
func selfSignedPEM(t testing.TB, hosts []string) generatedPEM {
	t.Helper()
	var p generatedPEM
	p.cert, p.key = testcerts.SelfSigned(t, hosts...)
	return p
}

// runGoldenCases runs every testdata/<dir>/<case>.in.yaml through run and
// compares the result with testdata/<dir>/<case>.out.yaml.
func runGoldenCases(t *testing.T, dir string, run func(*testing.T, fixture) []byte) {
	t.Helper()
	inputs, err := filepath.Glob(filepath.Join("testdata", dir, "*.in.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) == 0 {
		t.Fatalf("no golden cases in testdata/%s", dir)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			got := run(t, loadFixture(t, in))
			xdstest.Golden(t, filepath.Join("testdata", dir, name+".out.yaml"), got)
		})
	}
}

// fixture is a parsed golden input.
type fixture struct {
	store   model.Store
	proxies []testProxy
	// certs holds the PEM generated for each TestCertificate, by Secret.
	certs map[model.NamespacedName]generatedPEM
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// loadFixture parses a golden input; it fails the test unless the input
// holds at least one TestProxy.
func loadFixture(t testing.TB, path string) fixture {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f := fixture{certs: map[model.NamespacedName]generatedPEM{}}
	var kube []string
	for _, doc := range docSeparator.Split(string(raw), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch head.Kind {
		case "TestProxy":
			var p testProxy
			if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
				t.Fatalf("%s: TestProxy: %v", path, err)
			}
			f.proxies = append(f.proxies, p)
		case "TestCertificate":
			var tc testCertificate
			if err := yaml.UnmarshalStrict([]byte(doc), &tc); err != nil {
				t.Fatalf("%s: TestCertificate: %v", path, err)
			}
			kube = append(kube, f.addCertificate(t, tc))
		default:
			kube = append(kube, doc)
		}
	}
	if len(f.proxies) == 0 {
		t.Fatalf("%s: no TestProxy document", path)
	}
	f.store = xdstest.Store(t, strings.Join(kube, "\n---\n"))
	return f
}

// addCertificate generates the certificate tc describes, records it, and
// returns the Secret document that carries it.
func (f fixture) addCertificate(t testing.TB, tc testCertificate) string {
	t.Helper()
	pemPair := selfSignedPEM(t, tc.Hosts)
	f.certs[model.NamespacedName{Namespace: tc.Namespace, Name: tc.Name}] = pemPair
	secret, err := yaml.Marshal(map[string]any{
		"apiVersion": "v1",
		"kind":       "Secret",
		"metadata":   map[string]any{"name": tc.Name, "namespace": tc.Namespace},
		"type":       "kubernetes.io/tls",
		"data":       map[string]any{"tls.crt": pemPair.cert, "tls.key": pemPair.key}, // []byte marshals as base64
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(secret)
}

// onlyProxy is the fixture's TestProxy, for harnesses that take exactly one.
func (f fixture) onlyProxy(t testing.TB) testProxy {
	t.Helper()
	if len(f.proxies) != 1 {
		t.Fatalf("want exactly one TestProxy, have %d", len(f.proxies))
	}
	return f.proxies[0]
}

func (p testProxy) model() *model.Proxy {
	nodeType := model.SidecarProxy
	if p.Type == string(model.Router) {
		nodeType = model.Router
	}
	ip := ""
	if len(p.IPs) > 0 {
		ip = p.IPs[0]
	}
	name := p.Name
	if name == "" {
		name = "proxy"
	}
	parts := strings.SplitN(p.Locality, "/", 3)
	for len(parts) < 3 {
		parts = append(parts, "")
	}
	return &model.Proxy{
		ID:          string(nodeType) + "~" + ip + "~" + name + "." + p.Namespace + "~" + p.Namespace + ".svc.cluster.local",
		Type:        nodeType,
		IPAddresses: p.IPs,
		Namespace:   p.Namespace,
		DNSDomain:   p.Namespace + ".svc.cluster.local",
		Labels:      p.Labels,
		Locality:    model.Locality{Region: parts[0], Zone: parts[1], SubZone: parts[2]},
		// As on 15012: what a proxy may be sent of Secrets depends on it.
		VerifiedIdentity: verified(p.Namespace, "default"),
	}
}

func testPushOptions() pushcontext.Options {
	return pushcontext.Options{DomainSuffix: "cluster.local", RootNamespace: "istio-system"}
}

// gatewayTestPushOptions adds what the gateway cases need on top of
// testPushOptions: this control plane owns the "istio" ingress class, and
// only it. The cluster and listener goldens are built without it.
func gatewayTestPushOptions() pushcontext.Options {
	opts := testPushOptions()
	opts.Ingress = pushcontext.IngressOptions{
		Ownership: model.IngressOwnership{Class: "istio", Mode: model.IngressModeStrict},
	}
	return opts
}

// testLogger logs to buf without timestamps, so golden files can hold the
// lines.
func testLogger(buf *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
}

// logLines is the log, one trimmed line each, or nil when nothing was logged.
func logLines(buf *bytes.Buffer) []string {
	var lines []string
	for line := range strings.Lines(buf.String()) {
		lines = append(lines, strings.TrimSpace(line))
	}
	return lines
}

// sortedNames is a sorted copy of s that keeps nil (a wildcard) nil.
func sortedNames(s []string) []string {
	if s == nil {
		return nil
	}
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// generateTwice generates, then generates again from the caches, which must
// give the same resources.
func generateTwice(t *testing.T, g Generator, proxy *model.Proxy, push *pushcontext.PushContext, w *model.WatchedResource) model.Resources {
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

// checkResources asserts what holds for any CDS, EDS, LDS or RDS response:
// unique names that match the resources, only requested names unless
// wildcard, the right type, and Envoy's validation, deep inside Anys too.
// Route configurations also get checkUniqueDomains.
func checkResources(t *testing.T, w *model.WatchedResource, res model.Resources) {
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
		case *cluster.Cluster:
			name = m.GetName()
		case *endpoint.ClusterLoadAssignment:
			name = m.GetClusterName()
		case *listener.Listener:
			name = m.GetName()
		case *route.RouteConfiguration:
			name = m.GetName()
			checkUniqueDomains(t, m)
		case *tlsv3.Secret:
			name = m.GetName()
		}
		if name != r.Name {
			t.Errorf("%s: resource %q carries name %q", w.TypeURL, r.Name, name)
		}
		if err := xdstest.ValidateDeep(msg); err != nil {
			t.Errorf("%s: %s fails validation: %v", w.TypeURL, r.Name, err)
		}
	}
}

// renderResources renders each resource as protojson, never nil so that an
// empty response shows as [].
func renderResources(t testing.TB, res model.Resources) []json.RawMessage {
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

// goldenSection is one top-level key of a golden output.
type goldenSection struct {
	name  string
	value any
	omit  bool
}

// renderGolden writes the sections as YAML in the order given (a map would
// sort them), leaving out those marked omit.
func renderGolden(t testing.TB, sections ...goldenSection) []byte {
	t.Helper()
	var out bytes.Buffer
	for _, s := range sections {
		if s.omit {
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
