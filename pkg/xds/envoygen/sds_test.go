package envoygen

import (
	"bytes"
	"slices"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// TestSecretsOnlyToTheGateway: SDS answers only the ingress gateway, and
// only for Secrets its TLS chains use; a Secret of the same namespace that
// no Ingress names, another namespace's Secret, or any name asked by a
// sidecar or another router, gets nothing.
func TestSecretsOnlyToTheGateway(t *testing.T) {
	store := xdstest.Store(t, gatewayWorld)
	web := selfSignedPEM(t, []string{"web.example.com"})
	other := selfSignedPEM(t, []string{"other.example.com"})
	store.UpsertSecret(&model.Secret{Name: "web-cert", Namespace: "app", Cert: web.cert, PrivateKey: web.key})
	store.UpsertSecret(&model.Secret{Name: "unused", Namespace: "app", Cert: other.cert, PrivateKey: other.key})
	store.UpsertSecret(&model.Secret{Name: "web-cert", Namespace: "elsewhere", Cert: other.cert, PrivateKey: other.key})
	push := pushcontext.Build(store, gatewayTestPushOptions(), nil, nil)
	sds := NewSecretGenerator(Options{})

	asked := []string{"kubernetes://app/unused", "kubernetes://app/web-cert", "kubernetes://elsewhere/web-cert", "kubernetes://web-cert"}
	sidecar := &model.Proxy{ID: "sidecar~10.1.0.1~web.app~app.svc.cluster.local", Type: model.SidecarProxy, Namespace: "app",
		Labels: ingressGatewayLabels, VerifiedIdentity: verified("app", "web")}
	// Any workload with a token can prove its own namespace and claim the
	// gateway's node type and labels; only the namespace it proved is its
	// own to choose from.
	impostor := &model.Proxy{ID: "router~10.1.0.9~gw.evil~evil.svc.cluster.local", Type: model.Router, Namespace: "evil",
		IPAddresses: []string{"10.1.0.9"}, Labels: ingressGatewayLabels, VerifiedIdentity: verified("evil", "default")}
	tests := []struct {
		desc  string
		proxy *model.Proxy
		w     *model.WatchedResource
		want  []string
	}{
		{"gateway, explicit names", gatewayProxy(ingressGatewayLabels),
			&model.WatchedResource{TypeURL: SecretType, ResourceNames: asked}, []string{"kubernetes://app/web-cert"}},
		{"gateway, wildcard", gatewayProxy(ingressGatewayLabels),
			&model.WatchedResource{TypeURL: SecretType, Wildcard: true}, []string{"kubernetes://app/web-cert"}},
		{"another router", gatewayProxy(map[string]string{"istio": "egressgateway"}),
			&model.WatchedResource{TypeURL: SecretType, ResourceNames: asked}, nil},
		{"the gateway on a plaintext stream (no proven identity)", unverified(gatewayProxy(ingressGatewayLabels)),
			&model.WatchedResource{TypeURL: SecretType, ResourceNames: asked}, nil},
		{"a sidecar with the gateway's labels", sidecar,
			&model.WatchedResource{TypeURL: SecretType, ResourceNames: asked}, nil},
		{"a router with the gateway's labels, proven in another namespace, explicit names", impostor,
			&model.WatchedResource{TypeURL: SecretType, ResourceNames: asked}, nil},
		{"a router with the gateway's labels, proven in another namespace, wildcard", impostor,
			&model.WatchedResource{TypeURL: SecretType, Wildcard: true}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			res, err := sds.Generate(tt.proxy, push, tt.w, &model.PushRequest{Full: true})
			if err != nil {
				t.Fatal(err)
			}
			if res == nil {
				t.Fatal("nil result; an empty response must still be a response")
			}
			var got []string
			for _, r := range res {
				got = append(got, r.Name)
				s := &tlsv3.Secret{}
				if err := r.Resource.UnmarshalTo(s); err != nil {
					t.Fatal(err)
				}
				if err := xdstest.ValidateDeep(s); err != nil {
					t.Errorf("%s: %v", r.Name, err)
				}
				if !bytes.Equal(s.GetTlsCertificate().GetCertificateChain().GetInlineBytes(), web.cert) ||
					!bytes.Equal(s.GetTlsCertificate().GetPrivateKey().GetInlineBytes(), web.key) {
					t.Errorf("%s does not carry app/web-cert's PEM", r.Name)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestSecretRotation: a new certificate in the same Secret is what the next
// push serves; one that becomes malformed is no longer served at all.
func TestSecretRotation(t *testing.T) {
	store := xdstest.Store(t, gatewayWorld)
	first, second := selfSignedPEM(t, []string{"web.example.com"}), selfSignedPEM(t, []string{"web.example.com"})
	sds := NewSecretGenerator(Options{})
	proxy := gatewayProxy(ingressGatewayLabels)
	w := &model.WatchedResource{TypeURL: SecretType, ResourceNames: []string{"kubernetes://app/web-cert"}}
	var push *pushcontext.PushContext
	serve := func(sec *model.Secret) model.Resources {
		t.Helper()
		store.UpsertSecret(sec)
		req := model.NewPushRequest(model.ConfigKey{Kind: model.KindSecret, Namespace: "app", Name: "web-cert"}, time.Now())
		push = pushcontext.Build(store, gatewayTestPushOptions(), push, req)
		res, err := sds.Generate(proxy, push, w, req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	certOf := func(res model.Resources) []byte {
		t.Helper()
		if len(res) != 1 {
			t.Fatalf("served %d secrets, want 1", len(res))
		}
		s := &tlsv3.Secret{}
		if err := res[0].Resource.UnmarshalTo(s); err != nil {
			t.Fatal(err)
		}
		return s.GetTlsCertificate().GetCertificateChain().GetInlineBytes()
	}
	if got := certOf(serve(&model.Secret{Name: "web-cert", Namespace: "app", Cert: first.cert, PrivateKey: first.key})); !bytes.Equal(got, first.cert) {
		t.Error("first certificate not served")
	}
	if got := certOf(serve(&model.Secret{Name: "web-cert", Namespace: "app", Cert: second.cert, PrivateKey: second.key})); !bytes.Equal(got, second.cert) {
		t.Error("rotated certificate not served")
	}
	// The key of another certificate does not match this one.
	if res := serve(&model.Secret{Name: "web-cert", Namespace: "app", Cert: second.cert, PrivateKey: first.key}); len(res) != 0 {
		t.Errorf("a certificate with the wrong key was served: %v", res)
	}
}

func unverified(p *model.Proxy) *model.Proxy {
	c := *p
	c.VerifiedIdentity = nil
	return &c
}
