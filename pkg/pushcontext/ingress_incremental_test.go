package pushcontext

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// ingressView is everything a reader can observe of the ingress index.
type ingressView struct {
	Gateway  []string
	Problems map[string][]string
	Secrets  map[string]*model.Secret
	Summary  IngressSummary
}

func observeIngress(pc *PushContext) ingressView {
	v := ingressView{
		Gateway:  describeGateway(pc.IngressGateway()),
		Problems: problemsByName(pc.IngressProblems()),
		Secrets:  map[string]*model.Secret{},
		Summary:  pc.ingress.summary(),
	}
	if g := pc.IngressGateway(); g != nil {
		for _, h := range g.TLS {
			v.Secrets[h.Secret.String()] = pc.Secret(h.Secret)
		}
	}
	return v
}

// retranslated names the Ingresses whose translation in pc is not the one
// prev held.
func retranslated(prev, pc *PushContext) []string {
	var out []string
	for k, t := range pc.ingress.translations {
		if prev.ingress.translations[k] != t {
			out = append(out, k.String())
		}
	}
	slices.Sort(out)
	return out
}

func incrementalIngressStore(cert testCert) model.Store {
	store := ingressStore(nil, func(s model.Store) {
		s.UpsertService(newService("shop", "cart", nil))
		s.UpsertSecret(tlsSecret("web", "cert", cert))
	})
	add := func(i *model.Ingress) {
		i.Revision = "1"
		store.UpsertIngress(i)
	}
	add(ing("web", "i0", 0, rule("a.example.com", path(model.PathTypePrefix, "/", toPort("a", 80)))))
	add(ing("web", "i1", 1, rule("a.example.com", path(model.PathTypePrefix, "/b", toPort("b", 80)))))
	add(withTLS(ing("web", "i2", 2, rule("tls.example.com", path(model.PathTypePrefix, "/", toPort("a", 9090)))), "cert"))
	add(ing("web", "i3", 3, rule("later.example.com", path(model.PathTypeExact, "/", toNamedPort("later", "http")))))
	add(ing("shop", "i4", 4, rule("shop.example.com", path(model.PathTypePrefix, "/cart", toPort("cart", 80)))))
	add(withClass(ing("web", "nginx-one", 5, rule("n.example.com", path(model.PathTypePrefix, "/", toPort("b", 80)))), "nginx", ""))
	return store
}

func TestIngressIncrementalBuild(t *testing.T) {
	cert := newTestCert(t, "tls.example.com")
	store := incrementalIngressStore(cert)
	opts := testOpts
	pc := Build(store, opts, nil, nil)
	if info := pc.BuildInfo(); info.IngressesTranslated != 5 || info.IngressesReused != 0 {
		t.Fatalf("first build translated %d and reused %d Ingresses, want 5 and 0", info.IngressesTranslated, info.IngressesReused)
	}
	upsert := func(i *model.Ingress, revision string) {
		i.Revision = revision
		store.UpsertIngress(i)
	}
	steps := []struct {
		name   string
		change func() *model.PushRequest
		// wantReused says the whole index is the previous one.
		wantReused       bool
		wantRetranslated []string
	}{
		{
			name: "one Ingress changed re-translates only it",
			change: func() *model.PushRequest {
				upsert(ing("web", "i0", 0, rule("a.example.com",
					path(model.PathTypePrefix, "/", toPort("a", 80)), path(model.PathTypeExact, "/new", toPort("b", 80)))), "2")
				return pushRequest(key(model.KindIngress, "web", "i0"))
			},
			wantRetranslated: []string{"web/i0"},
		},
		{
			name: "the same revision again is not re-translated",
			change: func() *model.PushRequest {
				upsert(ing("web", "i0", 0, rule("a.example.com",
					path(model.PathTypePrefix, "/", toPort("a", 80)), path(model.PathTypeExact, "/new", toPort("b", 80)))), "2")
				return pushRequest(key(model.KindIngress, "web", "i0"))
			},
		},
		{
			name: "a Service no Ingress names leaves the index alone",
			change: func() *model.PushRequest {
				store.UpsertService(newService("elsewhere", "x", nil))
				return pushRequest(key(model.KindService, "elsewhere", "x"))
			},
			wantReused: true,
		},
		{
			name: "a backend Service change re-translates the Ingresses that name it",
			change: func() *model.PushRequest {
				svc := newService("web", "b", nil)
				svc.Ports = svc.Ports[1:] // port 80 goes away
				store.UpsertService(svc)
				return pushRequest(key(model.KindService, "web", "b"))
			},
			wantRetranslated: []string{"web/i0", "web/i1"},
		},
		{
			name: "a missing backend Service appearing re-translates who named it",
			change: func() *model.PushRequest {
				store.UpsertService(newService("web", "later", nil))
				return pushRequest(key(model.KindService, "web", "later"))
			},
			wantRetranslated: []string{"web/i3"},
		},
		{
			// The store changes before it announces the change, and a build
			// for another change reads the store as it is: the index must
			// follow the services that build reads, announced or not.
			name: "a backend Service deleted before its change is announced re-translates who named it",
			change: func() *model.PushRequest {
				store.DeleteService(model.NamespacedName{Namespace: "web", Name: "later"})
				store.UpsertService(newService("elsewhere", "y", nil))
				return pushRequest(key(model.KindService, "elsewhere", "y"))
			},
			wantRetranslated: []string{"web/i3"},
		},
		{
			name: "a gateway Service change rebuilds the index without translating",
			change: func() *model.PushRequest {
				gw := gatewayService()
				gw.Ports[0].TargetPort = 80
				store.UpsertService(gw)
				return pushRequest(key(model.KindService, "istio-system", "istio-ingressgateway"))
			},
		},
		{
			name: "a Secret change re-translates the Ingresses that use it",
			change: func() *model.PushRequest {
				store.UpsertSecret(&model.Secret{Namespace: "web", Name: "cert", Cert: cert.cert, PrivateKey: []byte("broken")})
				return pushRequest(key(model.KindSecret, "web", "cert"))
			},
			wantRetranslated: []string{"web/i2"},
		},
		{
			name: "a Secret nobody uses rebuilds nothing of substance",
			change: func() *model.PushRequest {
				store.UpsertSecret(tlsSecret("web", "spare", cert))
				return pushRequest(key(model.KindSecret, "web", "spare"))
			},
		},
		{
			name: "an IngressClass change: newly owned Ingresses are translated",
			change: func() *model.PushRequest {
				store.UpsertIngressClass(ingressClass("nginx", model.IngressController, false))
				return pushRequest(key(model.KindIngressClass, "", "nginx"))
			},
			wantRetranslated: []string{"web/nginx-one"},
		},
		{
			name: "an Ingress deleted",
			change: func() *model.PushRequest {
				store.DeleteIngress(model.NamespacedName{Namespace: "web", Name: "i1"})
				return pushRequest(key(model.KindIngress, "web", "i1"))
			},
		},
		{
			name: "the Ingress's class changes away: no longer owned",
			change: func() *model.PushRequest {
				upsert(withClass(ing("shop", "i4", 4, rule("shop.example.com", path(model.PathTypePrefix, "/cart", toPort("cart", 80)))), "missing", ""), "2")
				return pushRequest(key(model.KindIngress, "shop", "i4"))
			},
		},
		{
			name: "a forced full push checks every input and reuses every translation",
			change: func() *model.PushRequest {
				return &model.PushRequest{Full: true}
			},
		},
		{
			name: "an endpoint change leaves the index alone",
			change: func() *model.PushRequest {
				store.SetEndpoints(model.NamespacedName{Namespace: "web", Name: "a"}, "s", []*model.Endpoint{newEndpoint("10.1.1.1", "http", nil)})
				return pushRequest(key(model.KindEndpoints, "web", "a"))
			},
			wantReused: true,
		},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			prev := pc
			pc = Build(store, opts, prev, step.change())
			if diff := cmp.Diff(observeIngress(Build(store, opts, nil, nil)), observeIngress(pc)); diff != "" {
				t.Fatalf("incremental ingress index differs from a fresh one (-fresh +incremental):\n%s", diff)
			}
			info := pc.BuildInfo()
			if got := pc.ingress == prev.ingress; got != step.wantReused {
				t.Fatalf("ingress index reused = %v, want %v", got, step.wantReused)
			}
			if slices.Contains(info.Reused, indexIngress) != step.wantReused {
				t.Errorf("BuildInfo reused %v, rebuilt %v; ingress index reused = %v", info.Reused, info.Rebuilt, step.wantReused)
			}
			if step.wantReused {
				if info.IngressesTranslated != 0 || info.IngressesReused != 0 {
					t.Errorf("index reused whole, yet BuildInfo counts %d translated, %d reused", info.IngressesTranslated, info.IngressesReused)
				}
				return
			}
			got := retranslated(prev, pc)
			if diff := cmp.Diff(step.wantRetranslated, got); diff != "" {
				t.Errorf("re-translated Ingresses (-want +got):\n%s", diff)
			}
			if info.IngressesTranslated != len(got) || info.IngressesReused != len(pc.ingress.translations)-len(got) {
				t.Errorf("BuildInfo counts %d translated and %d reused; %d of %d translations are new",
					info.IngressesTranslated, info.IngressesReused, len(got), len(pc.ingress.translations))
			}
		})
	}

	t.Run("changed ingress options translate everything again", func(t *testing.T) {
		changed := opts
		changed.Ingress.Ownership.Mode = model.IngressModeDefault
		next := Build(store, changed, pc, pushRequest(key(model.KindNamespace, "", "x")))
		if info := next.BuildInfo(); !info.Full || info.IngressesReused != 0 || info.IngressesTranslated != len(next.ingress.translations) {
			t.Errorf("build info after an options change = %+v", info)
		}
	})
}

// TestIngressConcurrentReads is meant for -race: readers use a snapshot's
// ingress index while the push loop builds newer snapshots that share its
// translations and merged hosts.
func TestIngressConcurrentReads(t *testing.T) {
	cert := newTestCert(t, "tls.example.com")
	store := incrementalIngressStore(cert)
	pc := Build(store, testOpts, nil, nil)
	want := observeIngress(pc)
	gateway := &model.Proxy{Type: model.Router, Namespace: "istio-system", Labels: map[string]string{"istio": "ingressgateway"}}
	var wg sync.WaitGroup
	var stop atomic.Bool
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				if !pc.IsIngressGateway(gateway) {
					t.Error("gateway proxy not recognised")
					return
				}
				if diff := cmp.Diff(want, observeIngress(pc)); diff != "" {
					t.Errorf("snapshot changed under a reader:\n%s", diff)
					return
				}
			}
		})
	}
	next := pc
	for i := range 50 {
		in := ing("web", "i0", 0, rule("a.example.com", path(model.PathTypePrefix, "/v"+strconv.Itoa(i), toPort("a", 80))))
		in.Revision = "r" + strconv.Itoa(i)
		store.UpsertIngress(in)
		next = Build(store, testOpts, next, pushRequest(key(model.KindIngress, "web", "i0")))
		_ = observeIngress(next)
	}
	stop.Store(true)
	wg.Wait()
}

// TestIngressAliasBackendIncremental: what an ExternalName backend is an
// alias of depends on Services the Ingress does not name (its target, and
// each hop of its CNAME chain), so a change to one of them re-translates it.
func TestIngressAliasBackendIncremental(t *testing.T) {
	store := ingressStore(nil, func(s model.Store) {
		s.UpsertService(externalService("web", "front", hostname("web", "middle"), nil))
		s.UpsertService(externalService("web", "middle", hostname("shop", "target"), nil))
	})
	i := ing("web", "i", 0, rule("a.example.com", path(model.PathTypePrefix, "/", toPort("front", 80))))
	i.Revision = "1"
	store.UpsertIngress(i)
	pc := Build(store, testOpts, nil, nil)
	if got, want := describeGateway(pc.IngressGateway())[1:], []string{
		"a.example.com Prefix / -> " + cluster("web", "front", 80) + " (web/i)",
	}; !slices.Equal(got, want) {
		t.Fatalf("before the target exists: %v, want %v", got, want)
	}

	steps := []struct {
		name   string
		change func() model.ConfigKey
		want   []string // the gateway's routes, after its ports
		// wantReused says the whole index is the previous one.
		wantReused bool
	}{
		{
			name: "the target appearing makes the backend an alias",
			change: func() model.ConfigKey {
				store.UpsertService(newService("shop", "target", nil))
				return key(model.KindService, "shop", "target")
			},
			want: []string{"a.example.com Prefix / -> " + cluster("shop", "target", 80) + " (web/i)"},
		},
		{
			name: "the target losing the port drops the route",
			change: func() model.ConfigKey {
				svc := newService("shop", "target", nil)
				svc.Ports = svc.Ports[1:]
				store.UpsertService(svc)
				return key(model.KindService, "shop", "target")
			},
		},
		{
			name: "a Service off the chain leaves the index alone",
			change: func() model.ConfigKey {
				store.UpsertService(newService("shop", "other", nil))
				return key(model.KindService, "shop", "other")
			},
			wantReused: true,
		},
		{
			name: "a hop of the chain changing its name",
			change: func() model.ConfigKey {
				store.UpsertService(externalService("web", "middle", hostname("shop", "other"), nil))
				return key(model.KindService, "web", "middle")
			},
			want: []string{"a.example.com Prefix / -> " + cluster("shop", "other", 80) + " (web/i)"},
		},
		{
			name: "the target hidden from the gateway: the backend's own DNS cluster again",
			change: func() model.ConfigKey {
				store.UpsertService(newService("shop", "other", model.ExportTo{"shop"}))
				return key(model.KindService, "shop", "other")
			},
			want: []string{"a.example.com Prefix / -> " + cluster("web", "front", 80) + " (web/i)"},
		},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			prev := pc
			pc = Build(store, testOpts, prev, pushRequest(step.change()))
			if diff := cmp.Diff(observeIngress(Build(store, testOpts, nil, nil)), observeIngress(pc)); diff != "" {
				t.Fatalf("incremental ingress index differs from a fresh one (-fresh +incremental):\n%s", diff)
			}
			if got := pc.ingress == prev.ingress; got != step.wantReused {
				t.Fatalf("ingress index reused = %v, want %v", got, step.wantReused)
			}
			if step.wantReused {
				return
			}
			if diff := cmp.Diff(step.want, describeGateway(pc.IngressGateway())[1:], cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("routes (-want +got):\n%s", diff)
			}
		})
	}
}
