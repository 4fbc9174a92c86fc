package envoygen

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

const (
	cdsBenchServices  = 1000
	cdsBenchEndpoints = 10
)

// cdsBenchWorld has 1,000 services (one HTTP port) with 10 endpoints each
// over three zones; every tenth service has a DestinationRule with two
// subsets, a connection pool, outlier detection (so locality failover
// applies to its load assignments) and ISTIO_MUTUAL TLS.
func cdsBenchWorld(b *testing.B) (*pushcontext.PushContext, []string) {
	b.Helper()
	store := model.NewStore()
	var names []string
	for i := range cdsBenchServices {
		name := fmt.Sprintf("svc-%04d", i)
		host := name + ".default.svc.cluster.local"
		store.UpsertService(&model.Service{
			Name: name, Namespace: "default", Hostname: host, ClusterIPs: []string{fmt.Sprintf("10.96.%d.%d", i/250, i%250)},
			Ports: []*model.Port{{Name: "http", Port: 8080, Protocol: model.ProtocolHTTP, TargetPort: 8080}},
		})
		names = append(names, OutboundClusterName(host, 8080, ""))
		eps := make([]*model.Endpoint, 0, cdsBenchEndpoints)
		for j := range cdsBenchEndpoints {
			eps = append(eps, &model.Endpoint{
				Address: fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j), Port: 8080, ServicePortName: "http",
				Labels:   map[string]string{"version": fmt.Sprintf("v%d", j%2+1)},
				Locality: model.Locality{Region: "r1", Zone: fmt.Sprintf("z%d", j%3)},
			})
		}
		store.SetEndpoints(model.NamespacedName{Namespace: "default", Name: name}, "slice", eps)
		if i%10 != 0 {
			continue
		}
		store.UpsertConfig(&model.Config{
			Kind: model.KindDestinationRule, Name: name, Namespace: "default", CreationTime: time.Unix(int64(i), 0),
			Spec: &networking.DestinationRule{
				Host: host,
				TrafficPolicy: &networking.TrafficPolicy{
					ConnectionPool: &networking.ConnectionPoolSettings{
						Tcp:  &networking.ConnectionPoolSettings_TCPSettings{MaxConnections: 100, ConnectTimeout: durationpb.New(time.Second)},
						Http: &networking.ConnectionPoolSettings_HTTPSettings{Http2MaxRequests: 1000},
					},
					OutlierDetection: &networking.OutlierDetection{Consecutive_5XxErrors: wrapperspb.UInt32(5)},
					Tls:              &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL},
				},
				Subsets: []*networking.Subset{
					{Name: "v1", Labels: map[string]string{"version": "v1"}},
					{Name: "v2", Labels: map[string]string{"version": "v2"}},
				},
			},
		})
		names = append(names, OutboundClusterName(host, 8080, "v1"), OutboundClusterName(host, 8080, "v2"))
	}
	return pushcontext.Build(store, pushcontext.Options{}, nil, nil), names
}

func cdsBenchProxy() *model.Proxy {
	return &model.Proxy{
		Type: model.SidecarProxy, Namespace: "default", IPAddresses: []string{"10.200.0.1"},
		Locality: model.Locality{Region: "r1", Zone: "z1"},
	}
}

// BenchmarkEnvoyCDS measures one sidecar's whole CDS response: "cold" with
// empty caches (the first proxy after a push), "warm" from the caches (each
// further proxy of the push).
func BenchmarkEnvoyCDS(b *testing.B) {
	push, names := cdsBenchWorld(b)
	w := &model.WatchedResource{TypeURL: ClusterType, Wildcard: true}
	want := len(names) + 3 // passthrough, inbound passthrough, black hole
	run := func(b *testing.B, g func() Generator) {
		b.ReportAllocs()
		for b.Loop() {
			res, err := g().Generate(cdsBenchProxy(), push, w, &model.PushRequest{Full: true})
			if err != nil || len(res) != want {
				b.Fatalf("got %d clusters (%v), want %d", len(res), err, want)
			}
		}
	}
	b.Run("cold", func(b *testing.B) { run(b, func() Generator { return NewClusterGenerator(Options{}) }) })
	warm := NewClusterGenerator(Options{})
	b.Run("warm", func(b *testing.B) { run(b, func() Generator { return warm }) })
}

// BenchmarkEnvoyEDS measures the load assignments of every cluster of one
// sidecar, cold and warm as BenchmarkEnvoyCDS.
func BenchmarkEnvoyEDS(b *testing.B) {
	push, names := cdsBenchWorld(b)
	w := &model.WatchedResource{TypeURL: EndpointType, ResourceNames: sortedNames(names)}
	run := func(b *testing.B, g func() Generator) {
		b.ReportAllocs()
		for b.Loop() {
			res, err := g().Generate(cdsBenchProxy(), push, w, &model.PushRequest{Full: true})
			if err != nil || len(res) != len(names) {
				b.Fatalf("got %d assignments (%v), want %d", len(res), err, len(names))
			}
		}
	}
	b.Run("cold", func(b *testing.B) { run(b, func() Generator { return NewEndpointGenerator(Options{}) }) })
	warm := NewEndpointGenerator(Options{})
	b.Run("warm", func(b *testing.B) { run(b, func() Generator { return warm }) })
}
