package pushcontext

import (
	"slices"
	"strings"

	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// CredentialPrefix marks an SDS name that stands for a Kubernetes Secret
// (Istio's "kubernetes://<name>"); CACertSuffix names the CA part of a
// credential: the Secret's own ca.crt, else the Secret "<name>-cacert".
const (
	CredentialPrefix = "kubernetes://"
	CACertSuffix     = "-cacert"
)

// credentialIndex holds the Secrets that DestinationRules name in
// tls.credentialName or tls.caCertCredentialName. Istio reads such a Secret
// from the namespace of the proxy that uses the rule, so every namespace's
// Secret of a named credential is kept; which proxy may have it is the SDS
// generator's question.
type credentialIndex struct {
	names   []string
	secrets map[model.NamespacedName]*model.Secret
}

func buildCredentialIndex(store model.Store, configs []*model.Config) *credentialIndex {
	idx := &credentialIndex{names: credentialNames(configs)}
	for _, name := range idx.names {
		for _, candidate := range []string{name, name + CACertSuffix} {
			for _, sec := range store.SecretsNamed(candidate) {
				if idx.secrets == nil {
					idx.secrets = map[model.NamespacedName]*model.Secret{}
				}
				idx.secrets[sec.Key()] = sec
			}
		}
	}
	return idx
}

// credentialNames lists, sorted, the Secret names that the rules' TLS
// settings name (a name with a scheme other than kubernetes:// is no
// Secret, and is left out).
func credentialNames(configs []*model.Config) []string {
	var names []string
	add := func(name string) {
		if secret, ok := CredentialSecretName(name); ok {
			names = append(names, secret)
		}
	}
	for _, cfg := range configs {
		spec, ok := cfg.Spec.(*networking.DestinationRule)
		if !ok {
			continue
		}
		ForEachTLS(spec, func(tls *networking.ClientTLSSettings) {
			add(tls.GetCredentialName())
			add(tls.GetCaCertCredentialName())
		})
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// CredentialSecretName is the Secret a credentialName refers to: a bare name,
// or one with the kubernetes:// scheme. ok is false for empty names and
// other schemes.
func CredentialSecretName(credential string) (name string, ok bool) {
	if credential == "" {
		return "", false
	}
	if rest, found := strings.CutPrefix(credential, CredentialPrefix); found {
		return rest, rest != ""
	}
	return credential, !strings.Contains(credential, "://")
}

// ForEachTLS calls f with every TLS setting of a rule: top level, port
// level, and those of each subset.
func ForEachTLS(spec *networking.DestinationRule, f func(*networking.ClientTLSSettings)) {
	visit := func(tp *networking.TrafficPolicy) {
		if tls := tp.GetTls(); tls != nil {
			f(tls)
		}
		for _, pl := range tp.GetPortLevelSettings() {
			if tls := pl.GetTls(); tls != nil {
				f(tls)
			}
		}
	}
	visit(spec.GetTrafficPolicy())
	for _, s := range spec.GetSubsets() {
		visit(s.GetTrafficPolicy())
	}
}

// HasCredentials reports whether any DestinationRule names a credential.
func (pc *PushContext) HasCredentials() bool { return len(pc.credentials.names) > 0 }

// CredentialSecret returns the Secret name in namespace ns when some rule
// names it as a credential (or it is the "-cacert" companion of one), nil
// otherwise.
func (pc *PushContext) CredentialSecret(ns, name string) *model.Secret {
	return pc.credentials.secrets[model.NamespacedName{Namespace: ns, Name: name}]
}
