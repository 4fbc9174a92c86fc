package xds

import (
	"fmt"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
	"github.com/meshpilot/meshpilot/pkg/xds/envoygen"
)

// sidecarBenchGenerators is the generator set the sidecar benchmark
// measures: Envoy's.
func sidecarBenchGenerators() map[string]Generator {
	set := map[string]Generator{}
	for typeURL, g := range envoygen.New(envoygen.Options{DomainSuffix: "cluster.local"}).ByTypeURL() {
		set[typeURL] = g
	}
	return set
}

const (
	benchServices      = 1000
	benchNamespaces    = 10
	benchEndpoints     = 10
	benchServicesPerDR = 10
	benchClientNS      = "client"
)

// seedSidecarWorld fills s with 1,000 services in 10 namespaces, each with an
// HTTP and a TCP port and 10 endpoints (pods in two versions and two zones),
// a DestinationRule with subsets and a traffic policy for every tenth
// service, and client pods (one per sidecar) behind a client service.
func seedSidecarWorld(s model.Store, sidecars int) {
	created := time.Unix(1_700_000_000, 0)
	for i := range benchServices {
		ns := fmt.Sprintf("ns-%d", i%benchNamespaces)
		name := fmt.Sprintf("svc-%d", i)
		host := name + "." + ns + ".svc.cluster.local"
		s.UpsertService(&model.Service{
			Name: name, Namespace: ns, Hostname: host, ClusterIPs: []string{fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)},
			Selector: map[string]string{"app": name},
			Ports: []*model.Port{
				{Name: "http", Port: 80, Protocol: model.ProtocolHTTP, TargetPort: 8080},
				{Name: "tcp-data", Port: 9000, Protocol: model.ProtocolTCP, TargetPort: 9000},
			},
		})
		eps := make([]*model.Endpoint, 0, 2*benchEndpoints)
		for e := range benchEndpoints {
			ip := fmt.Sprintf("10.%d.%d.%d", 100+i/250, i%250, e+1)
			// Every pod has a sidecar, as the injector labels it.
			labels := map[string]string{"app": name, "version": fmt.Sprintf("v%d", e%2+1), model.TLSModeLabel: model.TLSModeIstio}
			locality := model.Locality{Region: "eu", Zone: fmt.Sprintf("eu-%d", e%2+1)}
			for _, port := range []struct {
				name   string
				number uint32
			}{{"http", 8080}, {"tcp-data", 9000}} {
				eps = append(eps, &model.Endpoint{Address: ip, Port: port.number, ServicePortName: port.name, Labels: labels, MTLS: true,
					Locality: locality, Namespace: ns, ServiceAccount: name})
			}
		}
		s.SetEndpoints(model.NamespacedName{Namespace: ns, Name: name}, name+"-slice", eps)
		if i%benchServicesPerDR != 0 {
			continue
		}
		s.UpsertConfig(&model.Config{Kind: model.KindDestinationRule, Namespace: ns, Name: name, CreationTime: created,
			Spec: &networking.DestinationRule{
				Host: host,
				TrafficPolicy: &networking.TrafficPolicy{
					LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{
						Simple: networking.LoadBalancerSettings_LEAST_REQUEST}},
					ConnectionPool: &networking.ConnectionPoolSettings{
						Tcp:  &networking.ConnectionPoolSettings_TCPSettings{MaxConnections: 100},
						Http: &networking.ConnectionPoolSettings_HTTPSettings{Http2MaxRequests: 1000}},
					OutlierDetection: &networking.OutlierDetection{Interval: durationpb.New(10 * time.Second)},
				},
				Subsets: []*networking.Subset{
					{Name: "v1", Labels: map[string]string{"version": "v1"}},
					{Name: "v2", Labels: map[string]string{"version": "v2"}},
				},
			}})
	}
	s.UpsertService(&model.Service{
		Name: "client", Namespace: benchClientNS, Hostname: "client." + benchClientNS + ".svc.cluster.local",
		Selector: map[string]string{"app": "client"},
		Ports:    []*model.Port{{Name: "http", Port: 8080, Protocol: model.ProtocolHTTP, TargetPort: 8080}},
	})
	for i := range sidecars {
		s.UpsertWorkload(&model.Workload{Name: fmt.Sprintf("client-%d", i), Namespace: benchClientNS,
			IPs: []string{benchClientIP(i)}, Labels: map[string]string{"app": "client"}, ServiceAccount: "client",
			Locality: model.Locality{Region: "eu", Zone: "eu-1"}})
	}
}

func benchClientIP(i int) string { return fmt.Sprintf("10.200.%d.%d", i/250, i%250+1) }

func benchSidecarNode(i int) *corev3.Node {
	meta, err := structpb.NewStruct(map[string]any{
		"NAMESPACE": benchClientNS, "INSTANCE_IPS": benchClientIP(i), "LABELS": map[string]any{"app": "client"},
	})
	if err != nil {
		panic(err)
	}
	return &corev3.Node{
		Id:       fmt.Sprintf("sidecar~%s~client-%d.%s~%s.svc.cluster.local", benchClientIP(i), i, benchClientNS, benchClientNS),
		Metadata: meta,
		Locality: &corev3.Locality{Region: "eu", Zone: "eu-1"},
	}
}

// benchSidecar is a connected sidecar without a stream: its watches are
// filled as an Envoy would fill them, and generation goes through the
// server's shared path exactly as a push does.
type benchSidecar struct {
	c                 *connection
	cds, lds, rds, ed *watch
}

func newBenchSidecar(b *testing.B, s *Server, i int) *benchSidecar {
	c := s.newConnection(false)
	if err := c.initialize(benchSidecarNode(i)); err != nil {
		b.Fatal(err)
	}
	sc := &benchSidecar{c: c, cds: c.addWatch(ClusterType), lds: c.addWatch(ListenerType),
		rds: c.addWatch(RouteType), ed: c.addWatch(EndpointType)}
	sc.cds.setSubscription(nil, true)
	sc.lds.setSubscription(nil, true)
	return sc
}

// fullPush generates and assembles the four responses of a full push.
func (sc *benchSidecar) fullPush(b *testing.B, st *pushState) (resources int) {
	req := &model.PushRequest{Full: true}
	for _, w := range []*watch{sc.cds, sc.lds, sc.rds, sc.ed} {
		gen, err := sc.c.generate(w, req, 0, st)
		if err != nil {
			b.Fatal(err)
		}
		items := gen.items
		resp := &discoveryv3.DiscoveryResponse{VersionInfo: st.version, TypeUrl: w.typeURL,
			Resources: make([]*anypb.Any, len(items))}
		for i, it := range items {
			resp.Resources[i] = it.resource
		}
		resources += len(resp.Resources)
	}
	return resources
}

// referencedNames lists what a client subscribes to after receiving items:
// the EDS service names of EDS clusters, or the RDS route configurations of
// HTTP connection managers in listeners.
func referencedNames(b *testing.B, items []generated) []string {
	var names []string
	for _, it := range items {
		m, err := it.resource.UnmarshalNew()
		if err != nil {
			b.Fatal(err)
		}
		switch r := m.(type) {
		case *clusterv3.Cluster:
			if r.GetType() == clusterv3.Cluster_EDS {
				names = append(names, cmpOr(r.GetEdsClusterConfig().GetServiceName(), r.GetName()))
			}
		case *listenerv3.Listener:
			var hcms []*anypb.Any
			if api := r.GetApiListener().GetApiListener(); api != nil {
				hcms = append(hcms, api)
			}
			for _, fc := range append(slices.Clone(r.GetFilterChains()), r.GetDefaultFilterChain()) {
				for _, f := range fc.GetFilters() {
					hcms = append(hcms, f.GetTypedConfig())
				}
			}
			for _, a := range hcms {
				var hcm hcmv3.HttpConnectionManager
				if a.MessageIs(&hcm) {
					if err := a.UnmarshalTo(&hcm); err != nil {
						b.Fatal(err)
					}
					if rds := hcm.GetRds(); rds != nil {
						names = append(names, rds.GetRouteConfigName())
					}
				}
			}
		}
	}
	return sortedNames(names)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// BenchmarkSidecarFullPush measures a full push (CDS, LDS, RDS, EDS) to 1 and
// to 100 identical sidecars at 1,000 services, from generation to assembled
// responses, excluding the push context build and the network. Identical
// sidecars share one generation per type, so 100 should cost little more
// than one. autoMTLS=off measures what auto mTLS (transport socket matches
// in every cluster without a TLS rule) adds.
func BenchmarkSidecarFullPush(b *testing.B) {
	for _, n := range []int{1, 100} {
		for _, auto := range []bool{true, false} {
			name := fmt.Sprintf("sidecars=%d/autoMTLS=%s", n, map[bool]string{true: "on", false: "off"}[auto])
			b.Run(name, func(b *testing.B) { benchmarkSidecarFullPush(b, n, auto) })
		}
	}
}

func benchmarkSidecarFullPush(b *testing.B, n int, autoMTLS bool) {
	store := model.NewStore()
	seedSidecarWorld(store, n)
	set := sidecarBenchGenerators()
	s := NewServer(Options{
		Store:       store,
		PushContext: pushcontext.Options{DomainSuffix: "cluster.local", RootNamespace: "istio-system", DisableAutoMTLS: !autoMTLS},
		Generators:  func(*model.Proxy) map[string]Generator { return set },
	})
	forced := &model.PushRequest{Full: true}
	s.build(forced)

	sidecars := make([]*benchSidecar, n)
	for i := range sidecars {
		sidecars[i] = newBenchSidecar(b, s, i)
	}
	// What the sidecars subscribe to after the first CDS and LDS responses.
	st := s.current.Load()
	first := sidecars[0]
	clusters, err := first.c.generate(first.cds, forced, 0, st)
	if err != nil {
		b.Fatal(err)
	}
	listeners, err := first.c.generate(first.lds, forced, 0, st)
	if err != nil {
		b.Fatal(err)
	}
	edsNames, rdsNames := referencedNames(b, clusters.items), referencedNames(b, listeners.items)
	if len(edsNames) == 0 || len(rdsNames) == 0 {
		b.Fatalf("the first responses reference %d clusters and %d route configurations", len(edsNames), len(rdsNames))
	}
	for _, sc := range sidecars {
		sc.ed.setSubscription(slices.Clone(edsNames), false)
		sc.rds.setSubscription(slices.Clone(rdsNames), false)
	}

	b.ReportAllocs()
	b.ResetTimer()
	resources := 0
	for range b.N {
		// Every round serves a freshly built push context, so that neither
		// the server nor the generators can reuse the previous round's work.
		b.StopTimer()
		s.build(forced)
		st := s.current.Load()
		b.StartTimer()
		resources = 0
		for _, sc := range sidecars {
			resources += sc.fullPush(b, st)
		}
	}
	b.ReportMetric(float64(resources)/float64(n), "resources/sidecar")
}
