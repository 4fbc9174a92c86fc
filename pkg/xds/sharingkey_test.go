package xds

import (
	"bytes"
	"fmt"
	"maps"
	"reflect"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
	"github.com/meshpilot/meshpilot/pkg/xds/envoygen"
	"github.com/meshpilot/meshpilot/pkg/xds/grpcgen"
)

// seedProxyInputs makes a mesh where many proxy inputs matter: endpoints in
// two regions and two racks, a failoverPriority rule over region and rack,
// workload-selector rules in namespace "selective" (one of them on an
// original-destination cluster), and the proxy's own Pod.
func seedProxyInputs(s model.Store) {
	upsertService(s, "a", nil, nil)
	eps := []*model.Endpoint{
		{Address: "10.8.0.1", Port: 8080, ServicePortName: "http", Namespace: "default",
			Labels: map[string]string{"rack": "r1"}, Locality: model.Locality{Region: "east", Zone: "e1"}},
		{Address: "10.8.0.2", Port: 8080, ServicePortName: "http", Namespace: "default",
			Labels: map[string]string{"rack": "r2"}, Locality: model.Locality{Region: "east", Zone: "e1"}},
		{Address: "10.8.0.3", Port: 8080, ServicePortName: "http", Namespace: "default",
			Labels: map[string]string{"rack": "r2"}, Locality: model.Locality{Region: "west", Zone: "w1"}},
	}
	s.SetEndpoints(serviceKey("a"), "a-slice", eps)
	upsertRule(s, "a", hostname("a"), &networking.DestinationRule{TrafficPolicy: &networking.TrafficPolicy{
		OutlierDetection: &networking.OutlierDetection{Consecutive_5XxErrors: wrapperspb.UInt32(3)},
		LoadBalancer: &networking.LoadBalancerSettings{LocalityLbSetting: &networking.LocalityLoadBalancerSetting{
			FailoverPriority: []string{"topology.kubernetes.io/region", "rack"}}},
	}})
	s.UpsertConfig(&model.Config{Kind: model.KindDestinationRule, Namespace: "selective", Name: "pick",
		CreationTime: ruleCreated, Spec: &networking.DestinationRule{Host: hostname("a"),
			WorkloadSelector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "picky"}},
			TrafficPolicy:    simpleLB(networking.LoadBalancerSettings_RANDOM)}})
	// An original-destination cluster, whose mutual TLS follows whether
	// every endpoint has a sidecar, and which a workload-selecting rule
	// turns off for app=picky in selective.
	upsertService(s, "direct", nil, nil)
	s.SetEndpoints(serviceKey("direct"), "direct-slice", []*model.Endpoint{{Address: "10.8.0.9", Port: 8080,
		ServicePortName: "http", Namespace: "default", ServiceAccount: "direct", MTLS: true,
		Labels: map[string]string{model.TLSModeLabel: model.TLSModeIstio}}})
	upsertRule(s, "direct", hostname("direct"), &networking.DestinationRule{TrafficPolicy: simpleLB(networking.LoadBalancerSettings_PASSTHROUGH)})
	s.UpsertConfig(&model.Config{Kind: model.KindDestinationRule, Namespace: "selective", Name: "direct-plain",
		CreationTime: ruleCreated, Spec: &networking.DestinationRule{Host: hostname("direct"),
			WorkloadSelector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "picky"}},
			TrafficPolicy: &networking.TrafficPolicy{
				LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_PASSTHROUGH}},
				Tls:          &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_DISABLE},
			}}})
	upsertService(s, "client", nil, map[string]string{"app": "client"})
	// A credential only proxies that proved an identity may have.
	s.UpsertConfig(&model.Config{Kind: model.KindDestinationRule, Namespace: "default", Name: "client-tls",
		CreationTime: ruleCreated, Spec: &networking.DestinationRule{Host: hostname("client"),
			WorkloadSelector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "client"}},
			TrafficPolicy: &networking.TrafficPolicy{Tls: &networking.ClientTLSSettings{
				Mode: networking.ClientTLSSettings_SIMPLE, CredentialName: "client-ca"}}}})
	s.UpsertSecret(&model.Secret{Name: "client-ca-cacert", Namespace: "default", CACert: []byte("-----BEGIN CERTIFICATE-----\n")})
	s.UpsertWorkload(&model.Workload{Name: "client-0", Namespace: "default", IPs: []string{"10.0.0.1"},
		Labels: map[string]string{"app": "client"}})
	// Namespace peers has a workload-selecting PeerAuthentication and no
	// workload-selecting DestinationRule: only the mutual TLS resolved for
	// a proxy tells its inbound side apart.
	s.UpsertConfig(&model.Config{Kind: model.KindPeerAuthentication, Namespace: "peers", Name: "api",
		CreationTime: ruleCreated, Spec: &security.PeerAuthentication{
			Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "api"}},
			Mtls:     &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_STRICT},
			PortLevelMtls: map[uint32]*security.PeerAuthentication_MutualTLS{
				9090: {Mode: security.PeerAuthentication_MutualTLS_DISABLE},
			},
		}})
	s.UpsertService(&model.Service{Name: "api", Namespace: "peers", Hostname: "api.peers.svc.cluster.local",
		Selector: map[string]string{"app": "api"},
		Ports:    []*model.Port{{Name: "grpc", Port: 8080, Protocol: model.ProtocolGRPC, TargetPort: 8080}}})
	s.UpsertWorkload(&model.Workload{Name: "api-0", Namespace: "peers", IPs: []string{"10.0.0.2"},
		Labels: map[string]string{"app": "api"}})
	// A VirtualService whose route depends on the caller's labels: routes
	// in peers (which has no workload-selecting DestinationRule) differ
	// between proxies that differ only in them.
	s.UpsertConfig(&model.Config{Kind: model.KindVirtualService, Namespace: "peers", Name: "canary",
		CreationTime: ruleCreated, Spec: &networking.VirtualService{Hosts: []string{hostname("a")}, ExportTo: []string{"."},
			Http: []*networking.HTTPRoute{{
				Match:   []*networking.HTTPMatchRequest{{SourceLabels: map[string]string{"track": "canary"}}},
				Route:   []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: hostname("a")}}},
				Timeout: durationpb.New(time.Second),
			}}}})
}

// proxyVariants returns, for each field of model.Proxy, copies of base that
// differ in that field alone. A field of a type this function does not know
// fails the test, so that whoever adds it decides how it may vary.
func proxyVariants(t *testing.T, base model.Proxy) map[string][]model.Proxy {
	out := map[string][]model.Proxy{}
	v := reflect.ValueOf(base)
	for i := range v.NumField() {
		field := v.Type().Field(i)
		var variants []any
		switch field.Name {
		case "Labels":
			for _, labels := range []map[string]string{
				nil,
				{"unrelated": "x"},
				{"rack": "r2"},
				{"rack": "r1", "app": "client"},
				{"topology.kubernetes.io/region": "west"},
				{"app": "picky"},
				{"app": "api"},
				{"app": "api", model.TLSModeLabel: model.TLSModeIstio},
				{"app": "api", "track": "canary"},
				{"app": "client", model.TLSModeLabel: model.TLSModeIstio},
			} {
				variants = append(variants, labels)
			}
		case "Locality":
			variants = []any{model.Locality{}, model.Locality{Region: "west"}, model.Locality{Region: "east", Zone: "e2"},
				model.Locality{Region: "east", Zone: "e1", SubZone: "s"}}
		case "IPAddresses":
			variants = []any{[]string{"10.0.0.9"}, []string(nil)}
		case "Type":
			variants = []any{model.Router}
		case "Namespace":
			variants = []any{"selective", "istio-system", "other"}
		case "VerifiedIdentity":
			variants = []any{(*model.Identity)(nil), &model.Identity{TrustDomain: "cluster.local", Namespace: "default", ServiceAccount: "client"}}
		default:
			switch field.Type.Kind() {
			case reflect.String:
				variants = []any{"changed-" + field.Name}
			default:
				t.Fatalf("model.Proxy.%s (%s): no variants; add them here", field.Name, field.Type)
			}
		}
		for _, value := range variants {
			p := base
			reflect.ValueOf(&p).Elem().Field(i).Set(reflect.ValueOf(value).Convert(field.Type))
			out[field.Name] = append(out[field.Name], p)
		}
	}
	return out
}

// TestSharingKeyCoversEveryProxyInput is the guard on generation sharing:
// two proxies with the same sharing identity must get byte-identical
// resources of every type from every generator. It varies each proxy field
// in turn, so a generator that starts reading an input the identity omits
// fails here.
func TestSharingKeyCoversEveryProxyInput(t *testing.T) {
	store := model.NewStore()
	seedProxyInputs(store)
	pc := pushcontext.Build(store, pushcontext.Options{DomainSuffix: "cluster.local", RootNamespace: "istio-system"}, nil,
		&model.PushRequest{Full: true})
	st := newPushState(pc, pc.Version(), 0)
	sets := map[string]map[string]Generator{
		"envoy": generatorsFor(&model.Proxy{}),
		"grpc":  generatorsFor(&model.Proxy{Generator: "grpc"}),
	}
	bases := []model.Proxy{{ID: "sidecar~10.0.0.1~client-0.default~default.svc.cluster.local", Type: model.SidecarProxy,
		IPAddresses: []string{"10.0.0.1"}, Namespace: "default", DNSDomain: "default.svc.cluster.local",
		Labels: map[string]string{"app": "client", "rack": "r1"}, Locality: model.Locality{Region: "east", Zone: "e1"},
	}, {ID: "sidecar~10.0.0.2~api-0.peers~peers.svc.cluster.local", Type: model.SidecarProxy,
		IPAddresses: []string{"10.0.0.2"}, Namespace: "peers", DNSDomain: "peers.svc.cluster.local",
		Labels: map[string]string{"app": "api"},
	}}
	compared := 0
	for i := range len(sets) * len(bases) {
		setName := []string{"envoy", "grpc"}[i%2]
		set, base := sets[setName], bases[i/2]
		if setName == "grpc" {
			base.Generator = "grpc"
		}
		for field, variants := range proxyVariants(t, base) {
			for _, variant := range variants {
				a, b := base, variant
				if identityOf(&a, set, st) != identityOf(&b, set, st) {
					continue
				}
				compared++
				for typeURL, g := range set {
					ga, gb := generateAll(t, &a, g, typeURL, pc, st), generateAll(t, &b, g, typeURL, pc, st)
					if !maps.EqualFunc(ga, gb, bytes.Equal) {
						t.Errorf("%s %s: proxies that differ in %s only (%v vs %v) share an identity but get different resources",
							setName, shortType(typeURL), field, fieldValue(a, field), fieldValue(b, field))
					}
				}
			}
		}
	}
	if compared == 0 {
		t.Fatal("no variant shared the base proxy's identity: the test compared nothing")
	}
}

func identityOf(p *model.Proxy, set map[string]Generator, st *pushState) string {
	c := &connection{proxy: p, generators: set}
	return c.identity(st)
}

func fieldValue(p model.Proxy, field string) string {
	return fmt.Sprint(reflect.ValueOf(p).FieldByName(field).Interface())
}

// generateAll generates typeURL for p, subscribed to everything: the wildcard
// for CDS, LDS and SDS, every cluster's load assignment, and every route its
// listeners use.
func generateAll(t *testing.T, p *model.Proxy, g Generator, typeURL string, pc *pushcontext.PushContext, st *pushState) map[string][]byte {
	t.Helper()
	w := &model.WatchedResource{TypeURL: typeURL, Wildcard: typeURL == ClusterType || typeURL == ListenerType || typeURL == SecretType}
	if typeURL == ListenerType && p.Generator == "grpc" {
		// A gRPC server asks for its inbound listeners by name, beside
		// the wildcard.
		for _, port := range []string{"8080", "9090"} {
			w.ResourceNames = append(w.ResourceNames, grpcgen.InboundListenerPrefix+"0.0.0.0:"+port)
		}
	}
	parents := func(parent string) model.Resources {
		return mustGenerate(t, p, generatorsFor(p)[parent], &model.WatchedResource{TypeURL: parent, Wildcard: true}, pc)
	}
	switch typeURL {
	case EndpointType:
		for _, c := range parents(ClusterType) {
			w.ResourceNames = append(w.ResourceNames, c.Name)
		}
	case RouteType:
		for _, l := range parents(ListenerType) {
			w.ResourceNames = append(w.ResourceNames, st.routesOf(generated{resource: l.Resource, hash: xxhash.Sum64(l.Resource.GetValue())})...)
		}
	}
	w.ResourceNames = sortedNames(w.ResourceNames)
	out := map[string][]byte{}
	for _, r := range mustGenerate(t, p, g, w, pc) {
		out[r.Name] = r.Resource.GetValue()
	}
	return out
}

// generatorsFor is the generator set the server gives p (as pkg/bootstrap
// chooses it).
func generatorsFor(p *model.Proxy) map[string]Generator {
	out := map[string]Generator{}
	if p.Generator == "grpc" {
		for typeURL, g := range grpcgen.New(grpcgen.Options{DomainSuffix: "cluster.local"}).ByTypeURL() {
			out[typeURL] = g
		}
		return out
	}
	for typeURL, g := range envoygen.New(envoygen.Options{DomainSuffix: "cluster.local"}).ByTypeURL() {
		out[typeURL] = g
	}
	return out
}

func mustGenerate(t *testing.T, p *model.Proxy, g Generator, w *model.WatchedResource, pc *pushcontext.PushContext) model.Resources {
	t.Helper()
	res, err := g.Generate(p, pc, w, &model.PushRequest{Full: true})
	if err != nil {
		t.Fatalf("%s for %s: %v", shortType(w.TypeURL), p.ID, err)
	}
	return res
}
