package pushcontext

import (
	"strconv"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/pkg/model"
)

const (
	benchIngresses = 1000
	benchPaths     = 5
)

// benchIngress is Ingress i of ingressBenchStore: five paths over five
// services of its namespace, by port number and by port name, on a host it
// shares with one other Ingress; every tenth also terminates TLS. variant
// changes one path so that a new object differs from the old one.
func benchIngress(i, variant int) *model.Ingress {
	ns := "ns-" + strconv.Itoa(i%benchNamespaces)
	in := &model.Ingress{
		Namespace:    ns,
		Name:         "ing-" + strconv.Itoa(i),
		ClassName:    "istio",
		CreationTime: epoch.Add(time.Duration(i) * time.Second),
		Revision:     strconv.Itoa(variant),
	}
	r := model.IngressRule{Host: "host-" + strconv.Itoa(i/2) + ".example.com"}
	for j := range benchPaths {
		b := toPort("svc-"+strconv.Itoa(j), 80)
		if j%2 == 1 {
			b = toNamedPort("svc-"+strconv.Itoa(j), "grpc")
		}
		pathType := model.PathTypePrefix
		if j == 0 {
			pathType = model.PathTypeExact
		}
		p := "/app-" + strconv.Itoa(i%2) + "/v" + strconv.Itoa(j)
		if j == 4 {
			p += "/variant-" + strconv.Itoa(variant)
		}
		r.Paths = append(r.Paths, path(pathType, p, b))
	}
	in.Rules = []model.IngressRule{r}
	if i%10 == 0 {
		in.TLS = []model.IngressTLS{{Hosts: []string{r.Host}, SecretName: "cert"}}
	}
	return in
}

func ingressBenchStore(b *testing.B) model.Store {
	cert := newTestCert(b, "example.com")
	store := model.NewStore()
	store.UpsertService(gatewayService())
	store.UpsertIngressClass(ingressClass("istio", model.IngressController, false))
	for n := range benchNamespaces {
		ns := "ns-" + strconv.Itoa(n)
		for j := range benchPaths {
			store.UpsertService(newService(ns, "svc-"+strconv.Itoa(j), nil))
		}
		store.UpsertSecret(tlsSecret(ns, "cert", cert))
	}
	for i := range benchIngresses {
		store.UpsertIngress(benchIngress(i, 0))
	}
	return store
}

// BenchmarkIngressTranslate measures the ingress index at 1,000 Ingresses
// with 5 paths each: translated from scratch, and rebuilt after one
// Ingress changed (which must re-translate that one alone).
func BenchmarkIngressTranslate(b *testing.B) {
	store := ingressBenchStore(b)
	opts := testOpts.withDefaults()
	base := Build(store, opts, nil, nil)
	if g := base.IngressGateway(); g == nil || len(g.HTTP) != benchIngresses/2 || len(base.IngressProblems()) != 0 {
		b.Fatalf("unexpected fixture: %+v, problems %v", base.Summary().Ingress, base.IngressProblems())
	}
	all := ingressChecks{services: true, secrets: true}

	b.Run("full", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var info BuildInfo
			buildIngressIndex(store, opts.Ingress, base.services, nil, all, &info)
		}
	})

	b.Run("one-ingress-changed", func(b *testing.B) {
		variants := [2]*model.Ingress{benchIngress(500, 1), benchIngress(500, 2)}
		req := pushRequest(key(model.KindIngress, variants[0].Namespace, variants[0].Name))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			store.UpsertIngress(variants[i%2])
			pc := Build(store, opts, base, req)
			if pc.build.IngressesTranslated != 1 {
				b.Fatalf("translated %d Ingresses, want 1", pc.build.IngressesTranslated)
			}
			i++
		}
	})
}
