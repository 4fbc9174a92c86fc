package ca

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	authnv1 "k8s.io/api/authentication/v1"
)

// Identity is a workload identity: the ServiceAccount <Namespace>/<ServiceAccount>
// in a trust domain. Its String form is the SPIFFE ID that Istio puts in the
// URI SAN: spiffe://<trust-domain>/ns/<ns>/sa/<sa>.
type Identity struct {
	TrustDomain    string
	Namespace      string
	ServiceAccount string
}

func (id Identity) String() string {
	return "spiffe://" + id.TrustDomain + "/ns/" + id.Namespace + "/sa/" + id.ServiceAccount
}

// URL is the identity as the URI SAN of a certificate.
func (id Identity) URL() *url.URL {
	return &url.URL{Scheme: "spiffe", Host: id.TrustDomain, Path: "/ns/" + id.Namespace + "/sa/" + id.ServiceAccount}
}

// ParseIdentity parses an Istio SPIFFE ID. It accepts only the exact
// spiffe://<td>/ns/<ns>/sa/<sa> shape: anything looser (queries, fragments,
// extra path segments, empty parts) could name two things at once.
func ParseIdentity(s string) (Identity, error) {
	rest, ok := strings.CutPrefix(s, "spiffe://")
	if !ok {
		return Identity{}, fmt.Errorf("identity %q is not a spiffe:// URI", s)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 5 || parts[1] != "ns" || parts[3] != "sa" {
		return Identity{}, fmt.Errorf("identity %q is not of the form spiffe://<trust-domain>/ns/<namespace>/sa/<serviceaccount>", s)
	}
	id := Identity{TrustDomain: parts[0], Namespace: parts[2], ServiceAccount: parts[4]}
	for _, p := range []string{id.TrustDomain, id.Namespace, id.ServiceAccount} {
		if p == "" || strings.ContainsAny(p, "?#%@: ") {
			return Identity{}, fmt.Errorf("identity %q has an empty or invalid part", s)
		}
	}
	return id, nil
}

// serviceAccountsGroup is the group the API server puts every
// ServiceAccount's tokens in.
const serviceAccountsGroup = "system:serviceaccounts"

// identityFromUser turns a TokenReview user (system:serviceaccount:<ns>:<sa>)
// into an identity. The user must also be in the ServiceAccounts group, as
// istiod requires: another authenticator of the API server (a webhook, a
// static token file) may name a user that way without it being one.
func identityFromUser(trustDomain string, user authnv1.UserInfo) (Identity, error) {
	if !slices.Contains(user.Groups, serviceAccountsGroup) {
		return Identity{}, fmt.Errorf("user %q is not in the group %s", user.Username, serviceAccountsGroup)
	}
	rest, ok := strings.CutPrefix(user.Username, "system:serviceaccount:")
	if !ok {
		return Identity{}, fmt.Errorf("user %q is not a ServiceAccount", user.Username)
	}
	ns, sa, ok := strings.Cut(rest, ":")
	if !ok || ns == "" || sa == "" || strings.Contains(sa, ":") {
		return Identity{}, fmt.Errorf("user %q is not a ServiceAccount", user.Username)
	}
	return Identity{TrustDomain: trustDomain, Namespace: ns, ServiceAccount: sa}, nil
}
