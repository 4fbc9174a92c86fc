package envoygen

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// clusterGoldenProxy is one proxy's section of testdata/clusters/<case>.out.yaml.
// A cluster case may hold several TestProxy documents, to show how one store
// looks to each; its name labels its section.
type clusterGoldenProxy struct {
	Proxy     string            `json:"proxy"`
	Clusters  []json.RawMessage `json:"clusters"`
	Endpoints []json.RawMessage `json:"endpoints"`
}

func TestClusterGolden(t *testing.T) {
	runGoldenCases(t, "clusters", runClusterGolden)
}

func runClusterGolden(t *testing.T, f fixture) []byte {
	t.Helper()
	var logs bytes.Buffer
	opts := Options{Logger: testLogger(&logs)}
	push := pushcontext.Build(f.store, testPushOptions(), nil, nil)
	cds, eds := NewClusterGenerator(opts), NewEndpointGenerator(opts)
	var proxies []clusterGoldenProxy
	for _, tp := range f.proxies {
		proxy := tp.model()
		cw := &model.WatchedResource{TypeURL: ClusterType, Wildcard: tp.Request.Clusters == nil, ResourceNames: sortedNames(tp.Request.Clusters)}
		clusters := generateTwice(t, cds, proxy, push, cw)
		checkResources(t, cw, clusters)

		ew := &model.WatchedResource{TypeURL: EndpointType, ResourceNames: sortedNames(tp.Request.Endpoints)}
		if tp.Request.Endpoints == nil {
			ew.ResourceNames = edsClusterNames(t, clusters)
		}
		endpoints := generateTwice(t, eds, proxy, push, ew)
		checkResources(t, ew, endpoints)
		proxies = append(proxies, clusterGoldenProxy{
			Proxy:     tp.Name,
			Clusters:  renderResources(t, clusters),
			Endpoints: renderResources(t, endpoints),
		})
	}
	// Problems are the push context's translation problems; warnings the
	// log lines, one per problem and push.
	var problems []string
	for _, p := range push.Summary().TranslationProblems {
		problems = append(problems, p.Kind+" "+p.Namespace+"/"+p.Name+": "+p.Message)
	}
	warnings := logLines(&logs)
	// The sections are in alphabetical order, as the first cluster goldens
	// were written.
	return renderGolden(t,
		goldenSection{"problems", problems, len(problems) == 0},
		goldenSection{"proxies", proxies, false},
		goldenSection{"warnings", warnings, len(warnings) == 0},
	)
}

// edsClusterNames lists the load assignments the EDS clusters of a CDS
// response fetch, sorted: each one's service_name, else its own name.
func edsClusterNames(t *testing.T, clusters model.Resources) []string {
	t.Helper()
	names := []string{}
	for _, r := range clusters {
		var c cluster.Cluster
		if err := r.Resource.UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		if c.GetType() == cluster.Cluster_EDS {
			names = append(names, cmp.Or(c.GetEdsClusterConfig().GetServiceName(), c.GetName()))
		}
	}
	slices.Sort(names)
	return names
}
