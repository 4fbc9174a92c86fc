package grpcgen

import (
	"fmt"
	"slices"
	"testing"
	"time"

	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
	"github.com/meshpilot/meshpilot/pkg/xds/loadassign"
)

const (
	benchServices  = 1000
	benchEndpoints = 10
)

// benchWorld has benchServices services with two ports and benchEndpoints
// endpoints each, spread over three zones; every tenth service has a
// DestinationRule. It returns the push context and every cluster name.
func benchWorld(b *testing.B) (*pushcontext.PushContext, []string) {
	b.Helper()
	store, names := benchStore(b)
	return pushcontext.Build(store, testPushOptions(), nil, nil), names
}

// benchStore fills a store with benchWorld's services and returns it with
// every cluster name.
func benchStore(b *testing.B) (model.Store, []string) {
	b.Helper()
	store := model.NewStore()
	var names []string
	for i := range benchServices {
		name := fmt.Sprintf("svc-%04d", i)
		host := name + ".default.svc.cluster.local"
		store.UpsertService(&model.Service{
			Name: name, Namespace: "default", Hostname: host,
			Ports: []*model.Port{{Name: "grpc", Port: 7070}, {Name: "grpc-admin", Port: 7071}},
		})
		var eps []*model.Endpoint
		for j := range benchEndpoints {
			for _, port := range []string{"grpc", "grpc-admin"} {
				eps = append(eps, &model.Endpoint{
					Address:         fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j),
					Port:            map[string]uint32{"grpc": 17070, "grpc-admin": 17071}[port],
					ServicePortName: port,
					Locality:        model.Locality{Region: "r1", Zone: fmt.Sprintf("z%d", j%3)},
				})
			}
		}
		store.SetEndpoints(model.NamespacedName{Namespace: "default", Name: name}, "slice", eps)
		if i%10 == 0 {
			store.UpsertConfig(&model.Config{Kind: model.KindDestinationRule, Name: name, Namespace: "default",
				CreationTime: time.Unix(int64(i), 0),
				Spec: &networking.DestinationRule{Host: host, TrafficPolicy: &networking.TrafficPolicy{
					LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{
						Simple: networking.LoadBalancerSettings_LEAST_REQUEST}},
				}}})
		}
		names = append(names, loadassign.ClusterName(host, 7070, ""), loadassign.ClusterName(host, 7071, ""))
	}
	slices.Sort(names)
	return store, names
}

func benchmarkGenerator(b *testing.B, newGen func() Generator, wantCount int) {
	push, names := benchWorld(b)
	proxy := &model.Proxy{Namespace: "default"}
	subscriptions := map[string]*model.WatchedResource{
		"wildcard": {Wildcard: true},
		"names":    {ResourceNames: names},
	}
	for _, sub := range []string{"wildcard", "names"} {
		w := subscriptions[sub]
		run := func(b *testing.B, gen func() Generator) {
			b.ReportAllocs()
			for b.Loop() {
				res, err := gen().Generate(proxy, push, w, &model.PushRequest{Full: true})
				if err != nil {
					b.Fatal(err)
				}
				if len(res) != wantCount {
					b.Fatalf("got %d resources, want %d", len(res), wantCount)
				}
			}
		}
		// cold: an empty cache every iteration, the cost of a new push
		// context version whose resources all changed.
		b.Run(sub+"/cold", func(b *testing.B) { run(b, newGen) })
		// warm: the cache filled by an earlier proxy or push.
		b.Run(sub+"/warm", func(b *testing.B) {
			g := newGen()
			run(b, func() Generator { return g })
		})
	}
}

func BenchmarkGenerateCDS(b *testing.B) {
	benchmarkGenerator(b, func() Generator { return NewClusterGenerator(Options{}) }, 2*benchServices)
}

func BenchmarkGenerateEDS(b *testing.B) {
	benchmarkGenerator(b, func() Generator { return NewEndpointGenerator(Options{}) }, 2*benchServices)
}
