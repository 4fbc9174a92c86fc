package pushcontext

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	networking "istio.io/api/networking/v1"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

const (
	strict     = security.PeerAuthentication_MutualTLS_STRICT
	permissive = security.PeerAuthentication_MutualTLS_PERMISSIVE
	disable    = security.PeerAuthentication_MutualTLS_DISABLE
	unset      = security.PeerAuthentication_MutualTLS_UNSET
)

// peerAuthn makes a PeerAuthentication; age orders them (0 is oldest), and
// selector nil makes it namespace- or mesh-wide.
func peerAuthn(ns, name string, age int, mode security.PeerAuthentication_MutualTLS_Mode, selector map[string]string, ports map[uint32]security.PeerAuthentication_MutualTLS_Mode) *model.Config {
	spec := &security.PeerAuthentication{Mtls: &security.PeerAuthentication_MutualTLS{Mode: mode}}
	if selector != nil {
		spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: selector}
	}
	for port, m := range ports {
		if spec.PortLevelMtls == nil {
			spec.PortLevelMtls = map[uint32]*security.PeerAuthentication_MutualTLS{}
		}
		spec.PortLevelMtls[port] = &security.PeerAuthentication_MutualTLS{Mode: m}
	}
	return &model.Config{
		Kind: model.KindPeerAuthentication, Namespace: ns, Name: name,
		CreationTime: epoch.Add(time.Duration(age) * time.Minute), Spec: spec,
	}
}

func TestInboundMTLSPrecedence(t *testing.T) {
	app := map[string]string{"app": "shop"}
	cases := []struct {
		name     string
		policies []*model.Config
		ns       string
		labels   map[string]string
		want     MTLSPolicy
		wantNS   model.MTLSMode
	}{
		{
			name: "nothing set is permissive", ns: "shop", labels: app,
			want: MTLSPolicy{Mode: model.MTLSPermissive}, wantNS: model.MTLSPermissive,
		},
		{
			name:     "mesh-wide policy applies everywhere",
			policies: []*model.Config{peerAuthn("istio-system", "default", 0, strict, nil, nil)},
			ns:       "shop", labels: app,
			want: MTLSPolicy{Mode: model.MTLSStrict}, wantNS: model.MTLSStrict,
		},
		{
			name: "namespace overrides mesh",
			policies: []*model.Config{
				peerAuthn("istio-system", "default", 0, strict, nil, nil),
				peerAuthn("shop", "default", 1, disable, nil, nil),
			},
			ns: "shop", labels: app,
			want: MTLSPolicy{Mode: model.MTLSDisable}, wantNS: model.MTLSDisable,
		},
		{
			name: "an unset namespace mode inherits the mesh's",
			policies: []*model.Config{
				peerAuthn("istio-system", "default", 0, strict, nil, nil),
				peerAuthn("shop", "default", 1, unset, nil, nil),
			},
			ns: "shop", labels: app,
			want: MTLSPolicy{Mode: model.MTLSStrict}, wantNS: model.MTLSStrict,
		},
		{
			name: "another namespace's policy does not apply",
			policies: []*model.Config{
				peerAuthn("other", "default", 0, strict, nil, nil),
				peerAuthn("other", "pick-shop", 0, strict, app, nil),
			},
			ns: "shop", labels: app,
			want: MTLSPolicy{Mode: model.MTLSPermissive}, wantNS: model.MTLSPermissive,
		},
		{
			name: "workload overrides namespace",
			policies: []*model.Config{
				peerAuthn("shop", "default", 0, disable, nil, nil),
				peerAuthn("shop", "shop-strict", 1, strict, app, nil),
			},
			ns: "shop", labels: map[string]string{"app": "shop", "version": "v1"},
			want: MTLSPolicy{Mode: model.MTLSStrict}, wantNS: model.MTLSDisable,
		},
		{
			name: "a selector that does not match leaves the namespace mode",
			policies: []*model.Config{
				peerAuthn("shop", "default", 0, disable, nil, nil),
				peerAuthn("shop", "cart-strict", 1, strict, map[string]string{"app": "cart"}, nil),
			},
			ns: "shop", labels: app,
			want: MTLSPolicy{Mode: model.MTLSDisable}, wantNS: model.MTLSDisable,
		},
		{
			name: "the oldest of two mesh policies wins",
			policies: []*model.Config{
				peerAuthn("istio-system", "newer", 5, disable, nil, nil),
				peerAuthn("istio-system", "older", 1, strict, nil, nil),
			},
			ns: "shop", labels: app,
			want: MTLSPolicy{Mode: model.MTLSStrict}, wantNS: model.MTLSStrict,
		},
		{
			name: "same age: the first by name wins",
			policies: []*model.Config{
				peerAuthn("shop", "b", 1, disable, nil, nil),
				peerAuthn("shop", "a", 1, strict, nil, nil),
			},
			ns: "shop", labels: app,
			want: MTLSPolicy{Mode: model.MTLSStrict}, wantNS: model.MTLSStrict,
		},
		{
			name: "the oldest of two matching workload policies wins, ports and all",
			policies: []*model.Config{
				peerAuthn("shop", "newer", 5, disable, map[string]string{"version": "v1"}, map[uint32]security.PeerAuthentication_MutualTLS_Mode{80: strict}),
				peerAuthn("shop", "older", 1, strict, app, nil),
			},
			ns: "shop", labels: map[string]string{"app": "shop", "version": "v1"},
			want: MTLSPolicy{Mode: model.MTLSStrict}, wantNS: model.MTLSPermissive,
		},
		{
			name:     "a selector policy in the root namespace is ignored, as in Istio",
			policies: []*model.Config{peerAuthn("istio-system", "pick", 0, strict, app, nil)},
			ns:       "istio-system", labels: app,
			want: MTLSPolicy{Mode: model.MTLSPermissive}, wantNS: model.MTLSPermissive,
		},
		{
			name: "port-level modes; an unset port inherits the workload's mode",
			policies: []*model.Config{
				peerAuthn("shop", "default", 0, strict, nil, nil),
				peerAuthn("shop", "ports", 1, unset, app, map[uint32]security.PeerAuthentication_MutualTLS_Mode{
					9090: disable, 8080: permissive, 7070: unset,
				}),
			},
			ns: "shop", labels: app,
			want: MTLSPolicy{Mode: model.MTLSStrict, Ports: []PortMTLS{
				{Port: 7070, Mode: model.MTLSStrict}, {Port: 8080, Mode: model.MTLSPermissive}, {Port: 9090, Mode: model.MTLSDisable},
			}},
			wantNS: model.MTLSStrict,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := model.NewStore()
			for _, p := range tc.policies {
				store.UpsertConfig(p)
			}
			pc := Build(store, testOpts, nil, nil)
			got := pc.InboundMTLS(tc.ns, tc.labels)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("InboundMTLS (-want +got):\n%s", diff)
			}
			if ns := pc.NamespaceMTLSMode(tc.ns); ns != tc.wantNS {
				t.Errorf("NamespaceMTLSMode = %v, want %v", ns, tc.wantNS)
			}
		})
	}
}

func TestMTLSPolicyForPort(t *testing.T) {
	p := MTLSPolicy{Mode: model.MTLSStrict, Ports: []PortMTLS{{Port: 8080, Mode: model.MTLSDisable}}}
	for port, want := range map[uint32]model.MTLSMode{8080: model.MTLSDisable, 9090: model.MTLSStrict} {
		if got := p.ForPort(port); got != want {
			t.Errorf("ForPort(%d) = %v, want %v", port, got, want)
		}
	}
}

// AllEndpointsMTLS is what an original-destination cluster sends mutual TLS
// by: every endpoint of the port, and at least one, marked for it as EDS
// marks them (the tlsMode label, unless the workload's own policy disables
// mutual TLS on the port).
func TestAllEndpointsMTLS(t *testing.T) {
	sidecar := map[string]string{"app": "cart", model.TLSModeLabel: model.TLSModeIstio}
	ep := func(addr, port string, mtls bool, labels map[string]string) *model.Endpoint {
		e := newEndpoint(addr, port, labels)
		e.Namespace, e.MTLS = "shop", mtls
		return e
	}
	cases := []struct {
		name           string
		eps            []*model.Endpoint
		policies       []*model.Config
		wantHTTP, gRPC bool
	}{
		{name: "no endpoints"},
		{
			name:     "every endpoint has a sidecar",
			eps:      []*model.Endpoint{ep("10.0.0.1", "http", true, sidecar), ep("10.0.0.2", "http", true, sidecar)},
			wantHTTP: true,
		},
		{
			name: "one endpoint without a sidecar",
			eps:  []*model.Endpoint{ep("10.0.0.1", "http", true, sidecar), ep("10.0.0.2", "http", false, nil)},
		},
		{
			name:     "each port on its own",
			eps:      []*model.Endpoint{ep("10.0.0.1", "http", true, sidecar), ep("10.0.0.2", "grpc", false, nil), ep("10.0.0.1", "grpc", true, sidecar)},
			wantHTTP: true,
		},
		{
			name:     "a workload policy disabling mutual TLS on the port",
			eps:      []*model.Endpoint{ep("10.0.0.1", "http", true, sidecar), ep("10.0.0.1", "grpc", true, sidecar)},
			policies: []*model.Config{peerAuthn("shop", "cart", 0, unset, map[string]string{"app": "cart"}, map[uint32]security.PeerAuthentication_MutualTLS_Mode{8080: disable})},
			gRPC:     true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := model.NewStore()
			svc := newService("shop", "cart", nil)
			store.UpsertService(svc)
			store.SetEndpoints(svc.Key(), "s", tc.eps)
			for _, p := range tc.policies {
				store.UpsertConfig(p)
			}
			pc := Build(store, testOpts, nil, nil)
			if got := pc.AllEndpointsMTLS(svc.Hostname, 80); got != tc.wantHTTP {
				t.Errorf("port 80: %v, want %v", got, tc.wantHTTP)
			}
			if got := pc.AllEndpointsMTLS(svc.Hostname, 9090); got != tc.gRPC {
				t.Errorf("port 9090: %v, want %v", got, tc.gRPC)
			}
			if pc.AllEndpointsMTLS(svc.Hostname, 1234) || pc.AllEndpointsMTLS("unknown.shop.svc.cluster.local", 80) {
				t.Error("an unknown port or service has endpoints that all take mutual TLS")
			}
		})
	}
}

// The endpoint fast path reports a service whose ports changed in whether
// every endpoint takes mutual TLS, so the push loop pushes clusters; a
// change that leaves that as it was is not reported, nor is any change of a
// service that no rule sends to original destinations (only such clusters
// depend on it).
func TestUpdateEndpointsReportsMTLSChanges(t *testing.T) {
	for _, passthrough := range []bool{true, false} {
		t.Run(fmt.Sprintf("passthrough=%v", passthrough), func(t *testing.T) {
			store := model.NewStore()
			svc := newService("shop", "cart", nil)
			store.UpsertService(svc)
			if passthrough {
				store.UpsertConfig(ruleConfig("shop", "cart", 0, &networking.DestinationRule{Host: "cart",
					TrafficPolicy: &networking.TrafficPolicy{LoadBalancer: simpleLB(networking.LoadBalancerSettings_PASSTHROUGH)}}))
			}
			ep := func(addr string, mtls bool) *model.Endpoint {
				e := newEndpoint(addr, "http", nil)
				e.Namespace, e.ServiceAccount, e.MTLS = "shop", "cart", mtls
				return e
			}
			store.SetEndpoints(svc.Key(), "s", []*model.Endpoint{ep("10.0.0.1", true)})
			pc := Build(store, testOpts, nil, nil)
			steps := []struct {
				name         string
				eps          []*model.Endpoint
				changed, all bool
			}{
				{"another endpoint with a sidecar", []*model.Endpoint{ep("10.0.0.1", true), ep("10.0.0.2", true)}, false, true},
				{"one without", []*model.Endpoint{ep("10.0.0.1", true), ep("10.0.0.2", true), ep("10.0.0.3", false)}, true, false},
				{"it moves", []*model.Endpoint{ep("10.0.0.1", true), ep("10.0.0.4", false)}, false, false},
				{"it goes", []*model.Endpoint{ep("10.0.0.1", true)}, true, true},
			}
			for _, step := range steps {
				store.SetEndpoints(svc.Key(), "s", step.eps)
				update := pc.UpdateEndpoints(store, []model.NamespacedName{svc.Key()})
				if len(update.Hosts) != 1 || len(update.IdentitiesChanged) != 0 {
					t.Fatalf("%s: %+v, want the host changed and no identity change", step.name, update)
				}
				var want []model.NamespacedName
				if step.changed && passthrough {
					want = []model.NamespacedName{svc.Key()}
				}
				if diff := cmp.Diff(want, update.MTLSChanged); diff != "" {
					t.Errorf("%s: MTLSChanged (-want +got):\n%s", step.name, diff)
				}
				if got := pc.AllEndpointsMTLS(svc.Hostname, 80); got != step.all {
					t.Errorf("%s: AllEndpointsMTLS = %v, want %v", step.name, got, step.all)
				}
			}
		})
	}
}
