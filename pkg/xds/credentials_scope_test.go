package xds

import (
	"testing"
	"time"

	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// TestCredentialRotationReachesItsNamespace: a DestinationRule credential
// is read from the proxy's own namespace, so rotating one namespace's
// Secret pushes SDS to the proxies there and to no one else.
func TestCredentialRotationReachesItsNamespace(t *testing.T) {
	credential := func(ns, version string) *model.Secret {
		return &model.Secret{Name: "a-client", Namespace: ns, Cert: []byte(version), PrivateKey: []byte(version)}
	}
	h := newHarness(t, harnessConfig{noStoreHandler: true, generators: stampedGenerators(), seed: func(s model.Store) {
		upsertService(s, "a", nil, nil)
		upsertRule(s, "a", hostname("a"), &networking.DestinationRule{TrafficPolicy: &networking.TrafficPolicy{
			Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_MUTUAL, CredentialName: "a-client"}}})
		s.UpsertSecret(credential("default", "v1"))
		s.UpsertSecret(credential("other", "v1"))
	}})
	mine := h.sotwAs("mine", nodeIn("mine", "default", nil))
	other := h.sotwAs("other", nodeIn("other", "other", nil))
	for _, c := range []*sotwClient{mine, other} {
		c.ack(c.subscribe(SecretType, "kubernetes://a-client"), "kubernetes://a-client")
		c.expectQuiet("after subscribing")
	}
	cases := []struct {
		ns          string
		pushed, not *sotwClient
	}{
		{"default", mine, other},
		{"other", other, mine},
	}
	for _, tc := range cases {
		h.store.UpsertSecret(credential(tc.ns, "v2"))
		h.pushNow(model.NewPushRequest(model.ConfigKey{Kind: model.KindSecret, Namespace: tc.ns, Name: "a-client"}, time.Now()))
		if got := tc.pushed.barrier(); len(got) != 1 || got[0].GetTypeUrl() != SecretType {
			t.Fatalf("%s's credential rotated: its proxy got %d responses, want SDS alone", tc.ns, len(got))
		}
		tc.not.expectQuiet("another namespace's credential rotated")
	}
}
