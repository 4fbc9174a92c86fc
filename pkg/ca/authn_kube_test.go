package ca

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
)

func TestTokenAuthenticator(t *testing.T) {
	t.Parallel()
	env := kubetest.StartWithoutCRDs(t)
	ns := env.Namespace(t, "authn")
	createSA(t, env, ns, "app")
	createSA(t, env, ns, "gone")
	goneToken := token(t, env, ns, "gone", []string{"istio-ca"}, nil)
	if err := env.Kube.CoreV1().ServiceAccounts(ns).Delete(context.Background(), "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	valid := token(t, env, ns, "app", []string{"istio-ca"}, nil)
	podGone := createPod(t, env, ns, "short-lived", "app", "node-a")
	podGoneToken := token(t, env, ns, "app", []string{"istio-ca"}, podGone)
	// Without a kubelet a graceful delete never ends (the Pod would stay,
	// terminating, and its token valid for the grace period), so delete it
	// at once, as a finished deletion looks.
	if err := env.Kube.CoreV1().Pods(ns).Delete(context.Background(), podGone.Name, *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatal(err)
	}
	apiKey := apiServerSigningKey(t, env)
	past := time.Now().Add(-2 * time.Hour).Unix()

	strict := NewTokenAuthenticator(env.Kube, TokenOptions{})
	firstParty := NewTokenAuthenticator(env.Kube, TokenOptions{AllowAPIServerAudience: true})
	want := Identity{TrustDomain: "cluster.local", Namespace: ns, ServiceAccount: "app"}

	tests := []struct {
		name   string
		ctx    context.Context
		authn  *TokenAuthenticator
		ok     bool
		noCred bool
	}{
		{"token for istio-ca", withBearer(valid), strict, true, false},
		{"re-signed by the API server's key, unchanged (control)", withBearer(resign(t, valid, apiKey, nil)), strict, true, false},
		{"token for another audience", withBearer(token(t, env, ns, "app", []string{"other"}, nil)), strict, false, false},
		{"token for the API server's audience", withBearer(token(t, env, ns, "app", nil, nil)), strict, false, false},
		{"token for the API server's audience, first-party-jwt allowed", withBearer(token(t, env, ns, "app", nil, nil)), firstParty, true, false},
		{"token for another audience, first-party-jwt allowed", withBearer(token(t, env, ns, "app", []string{"other"}, nil)), firstParty, false, false},
		// The API server's minimum expirationSeconds is 600, so a token
		// cannot be asked for already expired; this one carries the API
		// server's own signature over claims that expired two hours ago.
		{"expired", withBearer(resign(t, valid, apiKey, func(c map[string]any) {
			c["iat"], c["nbf"], c["exp"] = past-600, past-600, past
		})), strict, false, false},
		{"forged: signed by another key", withBearer(resign(t, valid, sameKindOfKey(t, apiKey), nil)), strict, false, false},
		{"forged: claims another ServiceAccount", withBearer(resign(t, valid, sameKindOfKey(t, apiKey), func(c map[string]any) {
			c["sub"] = "system:serviceaccount:kube-system:admin"
		})), strict, false, false},
		{"ServiceAccount deleted", withBearer(goneToken), strict, false, false},
		{"bound to a Pod that was deleted", withBearer(podGoneToken), strict, false, false},
		{"not a JWT", withBearer("not-a-jwt"), strict, false, false},
		{"no authorization header", context.Background(), strict, false, true},
		{"Basic, not Bearer", metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Basic "+valid)), strict, false, false},
		{"empty bearer", metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer ")), strict, false, false},
		{"two authorization headers", metadata.NewIncomingContext(context.Background(),
			metadata.Pairs("authorization", "Bearer "+valid, "authorization", "Bearer "+valid)), strict, false, false},
		{"oversized token", withBearer(strings.Repeat("a", maxTokenBytes+1)), strict, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.authn.Authenticate(tc.ctx)
			if !tc.ok {
				if err == nil {
					t.Fatalf("accepted as %s", c.Identity)
				}
				if errors.Is(err, ErrNoCredential) != tc.noCred {
					t.Errorf("error %v: ErrNoCredential is %v, want %v", err, !tc.noCred, tc.noCred)
				}
				if errors.Is(err, ErrUnavailable) {
					t.Errorf("a refused token reported as unavailable: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Identity != want {
				t.Errorf("identity %s, want exactly %s", c.Identity, want)
			}
		})
	}
}

func TestIdentityFromUser(t *testing.T) {
	serviceAccounts := []string{"system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"}
	for _, tc := range []struct {
		name   string
		user   string
		groups []string
		ok     bool
	}{
		{"a ServiceAccount", "system:serviceaccount:ns:sa", serviceAccounts, true},
		{"no account", "system:serviceaccount:ns", serviceAccounts, false},
		{"no namespace", "system:serviceaccount::sa", serviceAccounts, false},
		{"one part too many", "system:serviceaccount:ns:sa:x", serviceAccounts, false},
		{"a person", "admin", []string{"system:authenticated"}, false},
		{"a node", "system:node:n1", []string{"system:nodes", "system:authenticated"}, false},
		// A webhook or static-token authenticator can name any user; only
		// the group says the API server's ServiceAccount tokens vouch for it.
		{"named like a ServiceAccount, not in the group", "system:serviceaccount:ns:sa", []string{"system:authenticated"}, false},
		{"only the namespace's group", "system:serviceaccount:ns:sa", []string{"system:serviceaccounts:ns"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := identityFromUser("td", authnv1.UserInfo{Username: tc.user, Groups: tc.groups})
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok %v", err, tc.ok)
			}
			if tc.ok && id.String() != "spiffe://td/ns/ns/sa/sa" {
				t.Errorf("identity %s, want spiffe://td/ns/ns/sa/sa", id)
			}
		})
	}
}
