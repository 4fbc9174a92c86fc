package envoygen

import (
	"fmt"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// credentialUse is how a proxy's clusters use one SDS name that stands for
// a DestinationRule credential: the client certificate and key of
// credentialName, or a CA (credentialName's "-cacert", or
// caCertCredentialName).
type credentialUse struct {
	secret string // the Secret's name, in the proxy's namespace
	ca     bool
}

// credentialsKey is what a proxy's credential uses depend on: its
// namespace and kind, and its labels where workload-selector rules there
// may apply to it.
type credentialsKey struct {
	namespace string
	router    bool
	labels    string
}

// credentialUses maps the SDS names of the credentials the proxy's clusters
// use to their Secrets, under Istio's rule: a router (gateway) takes
// credentialName from any DestinationRule it sees; a sidecar only from
// rules with a workloadSelector that selects it (the cluster generator
// leaves the others out). Istio reads each Secret from the proxy's own
// namespace, so a proxy is never served another namespace's Secret.
func credentialUses(proxy *model.Proxy, push *pushcontext.PushContext) map[string]credentialUse {
	uses := map[string]credentialUse{}
	addCA := func(sdsName, secret string) {
		if _, taken := uses[sdsName]; !taken {
			uses[sdsName] = credentialUse{secret: secret, ca: true}
		}
	}
	for _, svc := range push.ServicesVisibleTo(proxy.Namespace) {
		rule := push.DestinationRuleForProxy(proxy, svc.Hostname)
		if rule == nil || (proxy.Type != model.Router && rule.Spec.GetWorkloadSelector() == nil) {
			continue
		}
		pushcontext.ForEachTLS(rule.Spec, func(tls *networking.ClientTLSSettings) {
			if mode := tls.GetMode(); mode != networking.ClientTLSSettings_SIMPLE && mode != networking.ClientTLSSettings_MUTUAL {
				return
			}
			if name, ok := pushcontext.CredentialSecretName(tls.GetCredentialName()); ok {
				sdsName := credentialResource(tls.GetCredentialName())
				if tls.GetMode() == networking.ClientTLSSettings_MUTUAL {
					// A certificate wins over a CA use of the same name.
					uses[sdsName] = credentialUse{secret: name}
				}
				if tls.GetCaCertCredentialName() == "" {
					addCA(sdsName+caCertSuffix, name)
				}
			}
			if name, ok := pushcontext.CredentialSecretName(tls.GetCaCertCredentialName()); ok {
				addCA(credentialResource(tls.GetCaCertCredentialName()), name)
			}
		})
	}
	return uses
}

type credentialSecretKey struct {
	namespace, sdsName string
	use                credentialUse
}

// buildCredential makes the SDS resource of one credential use, or
// noSecret when the Secret is missing or lacks what the use needs. A CA
// comes from the Secret's ca.crt, else from the ca.crt of its "-cacert"
// companion, as Istio reads it.
func (g *SecretGenerator) buildCredential(push *pushcontext.PushContext, ns, sdsName string, use credentialUse) (any, error) {
	sec := push.CredentialSecret(ns, use.secret)
	key := model.ConfigKey{Kind: model.KindSecret, Namespace: ns, Name: use.secret}
	problem := func(reason string) (any, error) {
		lrProblems{logger: g.opts.Logger, push: push}.report(key, fmt.Sprintf("credential %s not served over SDS: %s", sdsName, reason))
		return noSecret{}, nil
	}
	secret := &tlsv3.Secret{Name: sdsName}
	switch {
	case use.ca:
		var ca []byte
		if sec != nil {
			ca = sec.CACert
		}
		if len(ca) == 0 {
			if companion := push.CredentialSecret(ns, use.secret+caCertSuffix); companion != nil {
				ca = companion.CACert
			}
		}
		if len(ca) == 0 {
			return problem(fmt.Sprintf("no ca.crt in Secret %s/%s or %s/%s%s", ns, use.secret, ns, use.secret, caCertSuffix))
		}
		secret.Type = &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: ca}},
		}}
	case sec == nil:
		return problem(fmt.Sprintf("no Secret %s/%s", ns, use.secret))
	default:
		if err := checkKeyPair(sec); err != nil {
			return problem(err.Error())
		}
		secret.Type = &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: sec.Cert}},
			PrivateKey:       &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: sec.PrivateKey}},
		}}
	}
	b, err := lrMarshal.Marshal(secret)
	if err != nil {
		return nil, fmt.Errorf("envoygen: marshal secret %s: %w", sdsName, err)
	}
	return model.Resource{Name: sdsName, Resource: &anypb.Any{TypeUrl: SecretType, Value: b}}, nil
}
