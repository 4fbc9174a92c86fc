package envoygen

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

const (
	gatewayBenchIngresses = 1000
	gatewayBenchPaths     = 5
	gatewayBenchServices  = 100
)

// gatewayBenchWorld has gatewayBenchIngresses Ingresses, each for its own
// host with gatewayBenchPaths Prefix paths spread over
// gatewayBenchServices services; every fourth terminates TLS with its own
// Secret (all holding one certificate, generated once).
func gatewayBenchWorld(b *testing.B) (model.Store, *pushcontext.PushContext) {
	b.Helper()
	store := model.NewStore()
	store.UpsertService(&model.Service{Name: "istio-ingressgateway", Namespace: "istio-system",
		Hostname: "istio-ingressgateway.istio-system.svc.cluster.local",
		Ports: []*model.Port{
			{Name: "http2", Port: 80, Protocol: model.ProtocolHTTP2, TargetPort: 8080},
			{Name: "https", Port: 443, Protocol: model.ProtocolHTTPS, TargetPort: 8443},
		}})
	store.UpsertIngressClass(&model.IngressClass{Name: "istio", Controller: model.IngressController})
	for i := range gatewayBenchServices {
		name := fmt.Sprintf("svc-%03d", i)
		store.UpsertService(&model.Service{Name: name, Namespace: "app", Hostname: name + ".app.svc.cluster.local",
			Ports: []*model.Port{{Name: "http", Port: 80, Protocol: model.ProtocolHTTP, TargetPort: 8080}}})
	}
	pem := selfSignedPEM(b, []string{"*.example.com"})
	created := time.Unix(1_700_000_000, 0)
	for i := range gatewayBenchIngresses {
		host := fmt.Sprintf("host-%04d.example.com", i)
		ing := &model.Ingress{Name: fmt.Sprintf("ing-%04d", i), Namespace: "app", ClassName: "istio",
			Revision: "1", CreationTime: created.Add(time.Duration(i) * time.Second)}
		rule := model.IngressRule{Host: host}
		for j := range gatewayBenchPaths {
			rule.Paths = append(rule.Paths, model.IngressPath{
				Path: fmt.Sprintf("/api/v%d/items", j), PathType: model.PathTypePrefix,
				Backend: model.IngressBackend{ServiceName: fmt.Sprintf("svc-%03d", (i+j)%gatewayBenchServices), PortNumber: 80},
			})
		}
		ing.Rules = []model.IngressRule{rule}
		if i%4 == 0 {
			secret := fmt.Sprintf("cert-%04d", i)
			store.UpsertSecret(&model.Secret{Name: secret, Namespace: "app", Cert: pem.cert, PrivateKey: pem.key})
			ing.TLS = []model.IngressTLS{{Hosts: []string{host}, SecretName: secret}}
		}
		store.UpsertIngress(ing)
	}
	push := pushcontext.Build(store, gatewayTestPushOptions(), nil, nil)
	gw := push.IngressGateway()
	if gw == nil || len(gw.HTTP) != gatewayBenchIngresses || len(gw.TLS) != gatewayBenchIngresses/4 {
		b.Fatalf("the bench world is not what it claims: %+v", gw)
	}
	return store, push
}

// BenchmarkGatewayTranslate is the gateway's whole LDS and RDS (every route
// configuration its listeners name) from a cold cache: what the first
// gateway replica to ask pays after each change of an Ingress. Other
// replicas then share the result.
func BenchmarkGatewayTranslate(b *testing.B) {
	_, push := gatewayBenchWorld(b)
	proxy := gatewayProxy(ingressGatewayLabels)
	lw := &model.WatchedResource{TypeURL: ListenerType, Wildcard: true}
	rw := &model.WatchedResource{TypeURL: RouteType, Wildcard: true}
	full := &model.PushRequest{Full: true}
	b.ReportAllocs()
	var routes int
	for b.Loop() {
		lds, rds := newListenerGenerator(Options{}), newRouteGenerator(Options{})
		if _, err := lds.Generate(proxy, push, lw, full); err != nil {
			b.Fatal(err)
		}
		res, err := rds.Generate(proxy, push, rw, full)
		if err != nil {
			b.Fatal(err)
		}
		routes = len(res)
	}
	b.ReportMetric(float64(routes), "routeconfigs")
}

// BenchmarkGatewayOneIngressChanged is the gateway's LDS and RDS after one
// Ingress gained a path: virtual hosts that did not change are reused, so
// the cost is assembling the configurations. The push context build is
// not timed (pushcontext's benchmarks cover it).
func BenchmarkGatewayOneIngressChanged(b *testing.B) {
	store, push := gatewayBenchWorld(b)
	proxy := gatewayProxy(ingressGatewayLabels)
	lw := &model.WatchedResource{TypeURL: ListenerType, Wildcard: true}
	rw := &model.WatchedResource{TypeURL: RouteType, Wildcard: true}
	lds, rds := newListenerGenerator(Options{}), newRouteGenerator(Options{})
	generate := func(push *pushcontext.PushContext) {
		full := &model.PushRequest{Full: true}
		if _, err := lds.Generate(proxy, push, lw, full); err != nil {
			b.Fatal(err)
		}
		if _, err := rds.Generate(proxy, push, rw, full); err != nil {
			b.Fatal(err)
		}
	}
	generate(push)
	changed := store.Ingress(model.NamespacedName{Namespace: "app", Name: "ing-0500"})
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		next := *changed
		next.Revision = fmt.Sprint(i + 2)
		rule := next.Rules[0]
		rule.Paths = append(slices.Clip(rule.Paths), model.IngressPath{Path: fmt.Sprintf("/extra/%d", i), PathType: model.PathTypeExact,
			Backend: model.IngressBackend{ServiceName: "svc-000", PortNumber: 80}})
		next.Rules = []model.IngressRule{rule}
		store.UpsertIngress(&next)
		req := model.NewPushRequest(model.ConfigKey{Kind: model.KindIngress, Namespace: "app", Name: "ing-0500"}, time.Now())
		push = pushcontext.Build(store, gatewayTestPushOptions(), push, req)
		b.StartTimer()
		generate(push)
	}
}
