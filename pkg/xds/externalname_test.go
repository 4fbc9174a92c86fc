package xds

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// setExternalName makes service name (seeded by upsertService) an
// ExternalName Service for externalName, or an ordinary one again for "".
func setExternalName(s model.Store, name, externalName string) {
	svc := *s.Service(serviceKey(name))
	svc.ExternalName = externalName
	s.UpsertService(&svc)
}

// envoyNode is an Envoy sidecar's node in the default namespace.
func envoyNode(t *testing.T, name string) *corev3.Node {
	t.Helper()
	meta, err := structpb.NewStruct(map[string]any{"NAMESPACE": "default", "INSTANCE_IPS": "10.0.0.9"})
	if err != nil {
		t.Fatal(err)
	}
	return &corev3.Node{Id: "sidecar~10.0.0.9~" + name + ".default~default.svc.cluster.local", Metadata: meta}
}

// resolves checks that the active cluster of service name resolves
// host:80 itself, and that the client holds no load assignment for it.
func resolves(name, host string) func(xdstest.Snapshot) error {
	cluster := "outbound|80||" + hostname(name)
	return func(s xdstest.Snapshot) error {
		c := s.Clusters[cluster]
		var sa *corev3.SocketAddress
		if groups := c.GetLoadAssignment().GetEndpoints(); len(groups) == 1 && len(groups[0].GetLbEndpoints()) == 1 {
			sa = groups[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		}
		if c.GetType() != clusterv3.Cluster_STRICT_DNS || sa.GetAddress() != host || sa.GetPortValue() != 80 {
			return fmt.Errorf("cluster %s is %v, want STRICT_DNS to %s:80", cluster, c, host)
		}
		if _, ok := s.Endpoints[cluster]; ok {
			return fmt.Errorf("cluster %s has a load assignment", cluster)
		}
		return nil
	}
}

// hasEndpoints checks that service name's cluster is served from EDS.
func hasEndpoints(name string, n int) func(xdstest.Snapshot) error {
	cluster := "outbound|80||" + hostname(name)
	return func(s xdstest.Snapshot) error {
		if got := len(s.Endpoints[cluster].GetEndpoints()); s.Clusters[cluster].GetType() != clusterv3.Cluster_EDS || got != n {
			return fmt.Errorf("cluster %s: %d endpoint groups, want an EDS cluster with %d", cluster, got, n)
		}
		return nil
	}
}

// TestEnvoyWarmsWithExternalNameServices: an Envoy sidecar that sees an
// ExternalName Service warms fully, its cluster resolving the name (with
// the service's DestinationRule) and never subscribed to over EDS. A
// Service that becomes an ExternalName one and back goes through Envoy's
// warming both ways: the DNS cluster waits for nothing, and the EDS
// cluster that replaces it gets its load assignment again.
func TestEnvoyWarmsWithExternalNameServices(t *testing.T) {
	for _, mode := range []xdstest.Mode{xdstest.SotW, xdstest.Delta} {
		t.Run(mode.String(), func(t *testing.T) {
			h := newHarness(t, harnessConfig{seed: func(s model.Store) {
				seedWarming(s)
				upsertService(s, "billing", nil, nil)
				setExternalName(s, "billing", "billing.example.com")
				upsertRule(s, "billing", hostname("billing"), &networking.DestinationRule{TrafficPolicy: &networking.TrafficPolicy{
					Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE}}})
			}, generators: warmingGenerators()})
			c := xdstest.NewEnvoyClient(t, h.dial(), envoyNode(t, "client"), mode)
			c.RequireWarm(10*time.Second, all(resolves("billing", "billing.example.com"), hasEndpoints("a", 1)))
			if tls := c.Active().Clusters["outbound|80||"+hostname("billing")].GetTransportSocket(); tls == nil {
				t.Error("billing's cluster lost its DestinationRule's TLS origination")
			}

			setExternalName(h.store, "a", "a.example.com")
			c.RequireWarm(10*time.Second, resolves("a", "a.example.com"))
			setExternalName(h.store, "a", "")
			c.RequireWarm(10*time.Second, hasEndpoints("a", 1))

			for _, r := range c.Requests() {
				if r.TypeURL == EndpointType && (slices.Contains(r.ResourceNames, outboundBilling) || slices.Contains(r.Subscribe, outboundBilling)) {
					t.Errorf("the DNS cluster's name was requested over EDS: %v", r)
				}
			}
		})
	}
}

var outboundBilling = "outbound|80||" + hostname("billing")

func all(conds ...func(xdstest.Snapshot) error) func(xdstest.Snapshot) error {
	return func(s xdstest.Snapshot) error {
		for _, c := range conds {
			if err := c(s); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestDNSClusterWaitsForNoAssignment: when an EDS cluster becomes a DNS
// cluster, the client's EDS subscription still names it until it has
// applied the CDS response. The DNS cluster waits for no assignment, so
// the server neither sends one nor generates EDS again to try.
func TestDNSClusterWaitsForNoAssignment(t *testing.T) {
	gens := warmingGenerators()
	var edsRuns atomic.Int32
	eds := gens[EndpointType]
	// A func is never shared: every generation is this proxy's.
	gens[EndpointType] = GeneratorFunc(func(p *model.Proxy, pc *pushcontext.PushContext, w *model.WatchedResource, req *model.PushRequest) (model.Resources, error) {
		edsRuns.Add(1)
		return eds.Generate(p, pc, w, req)
	})
	h := newHarness(t, harnessConfig{seed: seedWarming, generators: gens})
	c := h.sotw("client")
	c.ack(c.subscribe(ClusterType))
	c.ack(c.subscribe(EndpointType, outboundA), outboundA)
	c.expectQuiet("after the ACKs")

	before := edsRuns.Load()
	setExternalName(h.store, "a", "a.example.com")
	c.expect(ClusterType)
	for _, r := range c.barrier() {
		t.Errorf("after the CDS update: unexpected %s%v", shortType(r.GetTypeUrl()), names(r.GetResources(), resourceName))
	}
	// The push's own EDS generation, and no second one to send the DNS
	// cluster's assignment as if the cluster were warming.
	if n := edsRuns.Load() - before; n > 1 {
		t.Errorf("EDS generated %d times in the push, want at most once", n)
	}
}

// TestEDSAssignment: which load assignment a cluster waits for, read from
// its bytes as the server sent them.
func TestEDSAssignment(t *testing.T) {
	eds := &clusterv3.Cluster{Name: "c", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: &corev3.ConfigSource{}}}
	named := proto.Clone(eds).(*clusterv3.Cluster)
	named.EdsClusterConfig.ServiceName = "assignment"
	dns := &clusterv3.Cluster{Name: "c", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS}}
	custom := &clusterv3.Cluster{Name: "c", ClusterDiscoveryType: &clusterv3.Cluster_ClusterType{
		ClusterType: &clusterv3.Cluster_CustomClusterType{Name: "envoy.clusters.dns"}}}
	marshal := func(c *clusterv3.Cluster) []byte {
		b, err := proto.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// A later occurrence of a field wins, and one of a message merges:
	// the cluster templates splice bytes together this way.
	spliced := append(marshal(named), marshal(&clusterv3.Cluster{Name: "c",
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: &corev3.ConfigSource{}}})...)
	retyped := append(marshal(eds), marshal(dns)...)
	truncated := marshal(named)
	truncated = truncated[:len(truncated)-1] // inside the last field
	cases := []struct {
		name  string
		value []byte
		want  string
		ok    bool
	}{
		{"EDS: its own name", marshal(eds), "c", true},
		{"EDS with a service_name", marshal(named), "assignment", true},
		{"STRICT_DNS", marshal(dns), "", false},
		{"no type: STATIC", marshal(&clusterv3.Cluster{Name: "c"}), "", false},
		{"a cluster_type extension", marshal(custom), "", false},
		{"merged service_name", spliced, "assignment", true},
		{"type overridden", retyped, "", false},
		{"truncated", truncated, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := edsAssignment("c", tc.value)
			if got != tc.want || ok != tc.ok {
				t.Errorf("edsAssignment = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
