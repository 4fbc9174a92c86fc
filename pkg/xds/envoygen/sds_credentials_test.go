package envoygen

import (
	"bytes"
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// credentialWorld: a gateway namespace "gw" whose rule originates mutual
// TLS to shop/api with credential client-cred; in shop, a rule with a
// workloadSelector (app=picky) that verifies shop/web with the CA of
// shop-ca, and a plain rule for shop/api naming plain-cred, which Istio
// keeps from sidecars and which gateways of other namespaces use.
const credentialWorld = `
apiVersion: v1
kind: Service
metadata: {name: api, namespace: shop}
spec: {clusterIP: 10.96.1.1, ports: [{name: https, port: 443}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {clusterIP: 10.96.1.2, ports: [{name: https, port: 443}]}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: api-tls, namespace: gw}
spec:
  host: api.shop.svc.cluster.local
  trafficPolicy: {tls: {mode: MUTUAL, credentialName: client-cred}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: picky, namespace: shop}
spec:
  host: web.shop.svc.cluster.local
  workloadSelector: {matchLabels: {app: picky}}
  trafficPolicy: {tls: {mode: SIMPLE, credentialName: shop-ca}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: plain, namespace: shop}
spec:
  host: api.shop.svc.cluster.local
  trafficPolicy: {tls: {mode: MUTUAL, credentialName: plain-cred}}
`

// sdsSecret is what a test expects of one served secret: a certificate's
// chain, or a CA's bytes.
type sdsSecret struct {
	cert, ca []byte
}

// TestCredentialsServedToTheProxiesThatUseThem: DestinationRule credentials
// are served over SDS from the proxy's own namespace, only to a proxy whose
// clusters use them (a gateway for any rule it sees, a sidecar only for a
// rule with a workloadSelector that selects it), and every SDS name those
// clusters refer to over ADS is answered, so they warm.
func TestCredentialsServedToTheProxiesThatUseThem(t *testing.T) {
	store := xdstest.Store(t, credentialWorld)
	gwCred := selfSignedPEM(t, []string{"client.gw"})
	otherCred := selfSignedPEM(t, []string{"client.other"})
	shopCA := selfSignedPEM(t, []string{"ca.shop"})
	store.UpsertSecret(&model.Secret{Name: "client-cred", Namespace: "gw", Cert: gwCred.cert, PrivateKey: gwCred.key, CACert: gwCred.cert})
	store.UpsertSecret(&model.Secret{Name: "client-cred", Namespace: "other", Cert: otherCred.cert, PrivateKey: otherCred.key, CACert: otherCred.cert})
	store.UpsertSecret(&model.Secret{Name: "shop-ca-cacert", Namespace: "shop", CACert: shopCA.cert})
	store.UpsertSecret(&model.Secret{Name: "plain-cred", Namespace: "shop", Cert: otherCred.cert, PrivateKey: otherCred.key, CACert: otherCred.cert})
	store.UpsertSecret(&model.Secret{Name: "plain-cred", Namespace: "other", Cert: otherCred.cert, PrivateKey: otherCred.key, CACert: otherCred.cert})
	push := pushcontext.Build(store, testPushOptions(), nil, nil)
	set := New(Options{})

	router := func(ns string) *model.Proxy {
		return &model.Proxy{ID: "router~10.1.0.9~gw." + ns + "~" + ns + ".svc.cluster.local", Type: model.Router, Namespace: ns,
			IPAddresses: []string{"10.1.0.9"}, VerifiedIdentity: verified(ns, "gateway")}
	}
	sidecar := func(labels map[string]string) *model.Proxy {
		return &model.Proxy{ID: "sidecar~10.1.0.7~x.shop~shop.svc.cluster.local", Type: model.SidecarProxy, Namespace: "shop",
			IPAddresses: []string{"10.1.0.7"}, Labels: labels, VerifiedIdentity: verified("shop", "x")}
	}
	everyName := []string{"kubernetes://client-cred", "kubernetes://client-cred-cacert", "kubernetes://plain-cred",
		"kubernetes://plain-cred-cacert", "kubernetes://shop-ca", "kubernetes://shop-ca-cacert"}
	tests := []struct {
		desc  string
		proxy *model.Proxy
		want  map[string]sdsSecret
	}{
		{"gateway in gw: its own namespace's rule names client-cred", router("gw"),
			map[string]sdsSecret{
				"kubernetes://client-cred":        {cert: gwCred.cert},
				"kubernetes://client-cred-cacert": {ca: gwCred.cert},
			}},
		{"gateway in other: the service namespace's rule, with the Secret of its own namespace", router("other"),
			map[string]sdsSecret{
				"kubernetes://plain-cred":        {cert: otherCred.cert},
				"kubernetes://plain-cred-cacert": {ca: otherCred.cert},
			}},
		{"selected sidecar: the CA from the -cacert companion", sidecar(map[string]string{"app": "picky"}),
			map[string]sdsSecret{"kubernetes://shop-ca-cacert": {ca: shopCA.cert}}},
		{"sidecar no selector picks: nothing, not even plain-cred of its namespace", sidecar(map[string]string{"app": "web"}),
			map[string]sdsSecret{}},
		{"gateway in gw on a plaintext stream: nothing", unverified(router("gw")), map[string]sdsSecret{}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			res, err := set.Secrets.Generate(tt.proxy, push, &model.WatchedResource{TypeURL: SecretType, ResourceNames: everyName},
				&model.PushRequest{Full: true})
			if err != nil {
				t.Fatal(err)
			}
			checkResources(t, &model.WatchedResource{TypeURL: SecretType, ResourceNames: everyName}, res)
			got := map[string]sdsSecret{}
			for _, r := range res {
				s := &tlsv3.Secret{}
				if err := r.Resource.UnmarshalTo(s); err != nil {
					t.Fatal(err)
				}
				got[r.Name] = sdsSecret{cert: s.GetTlsCertificate().GetCertificateChain().GetInlineBytes(),
					ca: s.GetValidationContext().GetTrustedCa().GetInlineBytes()}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("served %v, want %v", slices.Sorted(mapKeys(got)), slices.Sorted(mapKeys(tt.want)))
			}
			for name, want := range tt.want {
				if g := got[name]; !bytes.Equal(g.cert, want.cert) || !bytes.Equal(g.ca, want.ca) {
					t.Errorf("%s: served the wrong bytes (certificate %t, CA %t)", name, len(g.cert) > 0, len(g.ca) > 0)
				}
			}

			if tt.proxy.VerifiedIdentity == nil {
				return // its clusters' SDS references stay unserved, by design
			}
			// Whatever the proxy's clusters fetch over ADS is what it is served.
			clusters, err := set.Clusters.Generate(tt.proxy, push, &model.WatchedResource{TypeURL: ClusterType, Wildcard: true},
				&model.PushRequest{Full: true})
			if err != nil {
				t.Fatal(err)
			}
			if refs, served := adsSecretRefs(t, clusters), slices.Sorted(mapKeys(tt.want)); !slices.Equal(refs, served) {
				t.Fatalf("clusters fetch %v over ADS, served %v", refs, served)
			}
		})
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// adsSecretRefs lists, sorted, the SDS names that clusters fetch over ADS
// (not from the local agent).
func adsSecretRefs(t *testing.T, clusters model.Resources) []string {
	t.Helper()
	var out []string
	for _, r := range clusters {
		c := &clusterv3.Cluster{}
		if err := r.Resource.UnmarshalTo(c); err != nil {
			t.Fatal(err)
		}
		if c.GetTransportSocket() == nil {
			continue
		}
		ctx := &tlsv3.UpstreamTlsContext{}
		if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
			t.Fatal(err)
		}
		common := ctx.GetCommonTlsContext()
		configs := slices.Clone(common.GetTlsCertificateSdsSecretConfigs())
		if v := common.GetCombinedValidationContext().GetValidationContextSdsSecretConfig(); v != nil {
			configs = append(configs, v)
		}
		for _, sc := range configs {
			if sc.GetSdsConfig().GetAds() != nil {
				out = append(out, sc.GetName())
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
