package envoygen

import (
	"fmt"
	"testing"
	"time"

	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

const lrBenchServices = 1000

// lrBenchWorld has lrBenchServices services in namespace default, each with
// an HTTP port (80), a gRPC port (7070) and a TCP port (3306), plus a
// DestinationRule for every tenth (consistent hash on the HTTP ports, a
// tunnel on the TCP one), and the bench proxy's own Pod, selected by the
// first service.
func lrBenchWorld(b *testing.B) *pushcontext.PushContext {
	b.Helper()
	store := model.NewStore()
	for i := range lrBenchServices {
		name := fmt.Sprintf("svc-%04d", i)
		host := name + ".default.svc.cluster.local"
		svc := &model.Service{
			Name: name, Namespace: "default", Hostname: host,
			ClusterIPs: []string{fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)},
			Ports: []*model.Port{
				{Name: "http", Port: 80, Protocol: model.ProtocolHTTP, TargetPort: 8080},
				{Name: "tcp-db", Port: 3306, Protocol: model.ProtocolTCP, TargetPort: 3306},
				{Name: "grpc", Port: 7070, Protocol: model.ProtocolGRPC, TargetPort: 7070},
			},
		}
		if i == 0 {
			svc.Selector = map[string]string{"app": "bench"}
		}
		store.UpsertService(svc)
		if i%10 == 0 {
			store.UpsertConfig(&model.Config{Kind: model.KindDestinationRule, Name: name, Namespace: "default",
				CreationTime: time.Unix(int64(i), 0),
				Spec: &networking.DestinationRule{Host: host, TrafficPolicy: &networking.TrafficPolicy{
					LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_ConsistentHash{
						ConsistentHash: &networking.LoadBalancerSettings_ConsistentHashLB{
							HashKey: &networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName{HttpHeaderName: "x-user"},
						}}},
					Tunnel: &networking.TrafficPolicy_TunnelSettings{TargetHost: "db.example.com", TargetPort: 5432},
				}}})
		}
	}
	store.UpsertWorkload(&model.Workload{Name: "bench-0", Namespace: "default", IPs: []string{"10.1.0.1"},
		Labels: map[string]string{"app": "bench"}})
	return pushcontext.Build(store, testPushOptions(), nil, nil)
}

func lrBenchProxy() *model.Proxy {
	return lrSidecar("default", "10.1.0.1", map[string]string{"app": "bench"})
}

// runLRBench measures one sidecar's generation: cold builds with an empty
// cache every iteration (a new push context whose resources all changed),
// warm serves a proxy whose twin was already built (shared output).
func runLRBench(b *testing.B, newGen func() Generator, w *model.WatchedResource, want int) {
	push := lrBenchWorld(b)
	proxy := lrBenchProxy()
	generate := func(b *testing.B, g Generator) {
		res, err := g.Generate(proxy, push, w, &model.PushRequest{Full: true})
		if err != nil {
			b.Fatal(err)
		}
		if len(res) != want {
			b.Fatalf("got %d resources, want %d", len(res), want)
		}
	}
	b.Run("cold", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			generate(b, newGen())
		}
	})
	b.Run("warm", func(b *testing.B) {
		g := newGen()
		generate(b, g) // the twin; b.Loop starts the clock on its first call
		b.ReportAllocs()
		for b.Loop() {
			generate(b, g)
		}
	})
}

// BenchmarkEnvoyLDS: 1,000 TCP listeners, 2 HTTP listeners and the two
// virtual ones for one sidecar.
func BenchmarkEnvoyLDS(b *testing.B) {
	runLRBench(b, func() Generator { return NewListenerGenerator(Options{}) }, ldsWildcard, lrBenchServices+2+2)
}

// BenchmarkEnvoyRDS: two route configurations of 1,000 virtual hosts each.
func BenchmarkEnvoyRDS(b *testing.B) {
	w := &model.WatchedResource{TypeURL: RouteType, ResourceNames: []string{"7070", "80"}}
	runLRBench(b, func() Generator { return NewRouteGenerator(Options{}) }, w, 2)
}
