package envoygen

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// listenerTestProxy is the `kind: TestProxy` document of a listener golden
// input: who connects, and what it asks for.
type listenerTestProxy struct {
	Kind      string            `json:"kind"`
	Type      string            `json:"type"` // sidecar (default) or router
	Namespace string            `json:"namespace"`
	IPs       []string          `json:"ips"`
	Labels    map[string]string `json:"labels"`
	Locality  string            `json:"locality"` // region/zone/subzone
	Request   struct {
		// Listeners lists explicit LDS names; omitted means a wildcard
		// subscription, which is what Envoy sends.
		Listeners []string `json:"listeners"`
		// Routes lists RDS names; omitted means the ones the generated
		// listeners refer to, which is what Envoy asks for.
		Routes []string `json:"routes"`
	} `json:"request"`
}

// listenerFixture is a parsed golden input: the store built from its
// Kubernetes documents, and its TestProxy.
type listenerFixture struct {
	store model.Store
	proxy listenerTestProxy
}

var yamlDocSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

func loadListenerFixture(t testing.TB, path string) listenerFixture {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		kube  []string
		proxy *listenerTestProxy
	)
	for _, doc := range yamlDocSeparator.Split(string(raw), -1) {
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
		if proxy != nil {
			t.Fatalf("%s: more than one TestProxy", path)
		}
		proxy = &listenerTestProxy{}
		if err := yaml.UnmarshalStrict([]byte(doc), proxy); err != nil {
			t.Fatalf("%s: TestProxy: %v", path, err)
		}
	}
	if proxy == nil {
		t.Fatalf("%s: no TestProxy document", path)
	}
	return listenerFixture{store: xdstest.Store(t, strings.Join(kube, "\n---\n")), proxy: *proxy}
}

func (p listenerTestProxy) model() *model.Proxy {
	nodeType := model.SidecarProxy
	if p.Type == string(model.Router) {
		nodeType = model.Router
	}
	ip := ""
	if len(p.IPs) > 0 {
		ip = p.IPs[0]
	}
	var loc model.Locality
	parts := strings.SplitN(p.Locality, "/", 3)
	for len(parts) < 3 {
		parts = append(parts, "")
	}
	loc.Region, loc.Zone, loc.SubZone = parts[0], parts[1], parts[2]
	return &model.Proxy{
		ID:          string(nodeType) + "~" + ip + "~proxy." + p.Namespace + "~" + p.Namespace + ".svc.cluster.local",
		Type:        nodeType,
		IPAddresses: p.IPs,
		Namespace:   p.Namespace,
		DNSDomain:   p.Namespace + ".svc.cluster.local",
		Labels:      p.Labels,
		Locality:    loc,
	}
}

func listenerTestPushOptions() pushcontext.Options {
	return pushcontext.Options{DomainSuffix: "cluster.local", RootNamespace: "istio-system"}
}
