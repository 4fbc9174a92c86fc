package wdsgen

import (
	"fmt"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// benchMesh is a realistic ambient mesh: 5,000 pods behind 500 services
// (10 replicas each) in 50 namespaces, half of them ambient.
func benchMesh() model.Store {
	store := model.NewStore()
	for ns := range 50 {
		labels := map[string]string{}
		if ns%2 == 0 {
			labels[model.DataplaneModeLabel] = model.DataplaneModeAmbient
		}
		store.UpsertNamespace(&model.Namespace{Name: fmt.Sprintf("ns-%d", ns), Labels: labels})
	}
	for s := range 500 {
		ns := fmt.Sprintf("ns-%d", s%50)
		app := fmt.Sprintf("app-%d", s)
		store.UpsertService(&model.Service{Name: app, Namespace: ns, Hostname: app + "." + ns + ".svc.cluster.local",
			ClusterIPs: []string{fmt.Sprintf("10.96.%d.%d", s/250, s%250)}, Selector: map[string]string{"app": app},
			Ports: []*model.Port{
				{Name: "http", Port: 80, Protocol: model.ProtocolHTTP, TargetPort: 8080},
				{Name: "grpc", Port: 9090, Protocol: model.ProtocolGRPC, TargetPortName: "grpc"},
			}})
		for r := range 10 {
			store.UpsertWorkload(benchPod(ns, app, s*10+r, "v1"))
		}
	}
	return store
}

func benchPod(ns, app string, i int, version string) *model.Workload {
	return &model.Workload{Name: fmt.Sprintf("%s-%d", app, i), Namespace: ns, IPs: []string{fmt.Sprintf("10.%d.%d.%d", i/65536, i/256%256, i%256)},
		Labels: map[string]string{"app": app, "version": version}, ServiceAccount: app, NodeName: fmt.Sprintf("node-%d", i%100),
		WorkloadName: app, CanonicalName: app, CanonicalRevision: version, Ready: true, Redirected: true,
		NamedPorts: []model.NamedPort{{Name: "grpc", Port: 9091}}}
}

var wildcard = &model.WatchedResource{TypeURL: AddressType, Wildcard: true}

// BenchmarkWDSFullBuild is the first generation of a push context: every
// Address built and marshalled (a cold start, or a mesh-wide change).
func BenchmarkWDSFullBuild(b *testing.B) {
	push := pushcontext.Build(benchMesh(), pushcontext.Options{}, nil, nil)
	b.ReportAllocs()
	for b.Loop() {
		g := New(Options{}).Addresses
		res, err := g.Generate(&model.Proxy{Type: model.NodeProxy}, push, wildcard, &model.PushRequest{Full: true})
		if err != nil || len(res) != 5500 {
			b.Fatalf("%d resources, %v", len(res), err)
		}
	}
}

// BenchmarkWDSPodChurn is the steady state: one Pod changes, the push
// context is rebuilt incrementally, and WDS is generated for it, reusing
// every other Address's marshalled bytes.
func BenchmarkWDSPodChurn(b *testing.B) {
	store := benchMesh()
	prev := pushcontext.Build(store, pushcontext.Options{}, nil, nil)
	g := New(Options{}).Addresses
	proxy := &model.Proxy{Type: model.NodeProxy}
	if _, err := g.Generate(proxy, prev, wildcard, &model.PushRequest{Full: true}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		pod := benchPod("ns-0", "app-0", 0, fmt.Sprintf("v%d", i))
		store.UpsertWorkload(pod)
		req := model.NewPushRequest(model.ConfigKey{Kind: model.KindWorkload, Namespace: pod.Namespace, Name: pod.Name}, time.Now())
		push := pushcontext.Build(store, pushcontext.Options{}, prev, req)
		if _, err := g.Generate(proxy, push, wildcard, req); err != nil {
			b.Fatal(err)
		}
		prev = push
	}
}

// BenchmarkWDSPodChurnGenerateOnly is BenchmarkWDSPodChurn without the
// push context build: what WDS itself costs per Pod churn at this size.
func BenchmarkWDSPodChurnGenerateOnly(b *testing.B) {
	store := benchMesh()
	prev := pushcontext.Build(store, pushcontext.Options{}, nil, nil)
	g := New(Options{}).Addresses
	proxy := &model.Proxy{Type: model.NodeProxy}
	if _, err := g.Generate(proxy, prev, wildcard, &model.PushRequest{Full: true}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		b.StopTimer()
		i++
		pod := benchPod("ns-0", "app-0", 0, fmt.Sprintf("v%d", i))
		store.UpsertWorkload(pod)
		req := model.NewPushRequest(model.ConfigKey{Kind: model.KindWorkload, Namespace: pod.Namespace, Name: pod.Name}, time.Now())
		push := pushcontext.Build(store, pushcontext.Options{}, prev, req)
		b.StartTimer()
		if _, err := g.Generate(proxy, push, wildcard, req); err != nil {
			b.Fatal(err)
		}
		prev = push
	}
}
