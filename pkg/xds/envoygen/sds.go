package envoygen

import (
	"crypto/tls"
	"fmt"
	"maps"
	"slices"
	"sync"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// SecretGenerator serves SDS over ADS: the certificates of the Kubernetes
// Secrets that the ingress gateway's TLS filter chains name, and the
// DestinationRule credentials (credentialName, caCertCredentialName) that a
// proxy's clusters use (sds_credentials.go). Only a proxy with a verified
// identity gets any (so plaintext xDS never carries a private key), and it
// gets a Secret only if its own configuration uses it: every other name (another namespace's
// Secret, a Secret nothing of the proxy names) is left unanswered, so
// nothing leaks. A Secret whose certificate and key do not form a usable
// pair is never sent. Each Secret is marshalled once per push context and
// shared.
type SecretGenerator struct {
	opts  Options
	cache lrCache

	// built keeps each SDS name's resource with the Secret object it was
	// built from, across push contexts: a Secret is checked and
	// marshalled once per object, not once per push.
	mu    sync.Mutex
	built map[string]builtSecret
}

type builtSecret struct {
	secret *model.Secret
	value  any // model.Resource, or noSecret
}

// NewSecretGenerator returns the SDS generator.
func NewSecretGenerator(opts Options) Generator {
	return &SecretGenerator{opts: opts.withDefaults()}
}

type secretKey struct{ name string }

// noSecret marks, in the cache, a name that has nothing to serve.
type noSecret struct{}

// Generate implements Generator. The result follows the order of the
// subscribed names (sorted); a wildcard subscription gets every Secret the
// proxy uses.
func (g *SecretGenerator) Generate(proxy *model.Proxy, push *pushcontext.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	if push == nil {
		return nil, fmt.Errorf("envoygen: no push context")
	}
	if proxy.VerifiedIdentity == nil {
		// Every Secret served here carries a private key or stands beside
		// one: only a client that proved who it is, over TLS, gets any.
		return model.Resources{}, nil
	}
	gen := g.cache.generation(push.Version())
	var gateway map[string]model.NamespacedName
	if gw := gatewayFor(proxy, push); gw != nil {
		used, err := gen.get(gatewaySecretsKey{}, func() (any, error) {
			used := gatewaySecrets(gw)
			g.forgetUnused(used)
			return used, nil
		})
		if err != nil {
			return nil, err
		}
		gateway = used.(map[string]model.NamespacedName)
	}
	var credentials map[string]credentialUse
	if push.HasCredentials() {
		key := credentialsKey{namespace: proxy.Namespace, router: proxy.Type == model.Router}
		if push.HasWorkloadSelectorRules(proxy.Namespace) {
			key.labels = canonicalLabels(proxy.Labels)
		}
		uses, err := gen.get(key, func() (any, error) { return credentialUses(proxy, push), nil })
		if err != nil {
			return nil, err
		}
		credentials = uses.(map[string]credentialUse)
	}
	names := w.ResourceNames
	if w.Wildcard {
		names = slices.Sorted(maps.Keys(gateway))
		for name := range credentials {
			if _, dup := gateway[name]; !dup {
				names = append(names, name)
			}
		}
		slices.Sort(names)
	}
	out := make(model.Resources, 0, len(names))
	for _, name := range names {
		var v any
		var err error
		if ref, ok := gateway[name]; ok {
			v, err = gen.get(secretKey{name}, func() (any, error) { return g.build(push, name, ref) })
		} else if use, ok := credentials[name]; ok {
			v, err = gen.get(credentialSecretKey{proxy.Namespace, name, use}, func() (any, error) {
				return g.buildCredential(push, proxy.Namespace, name, use)
			})
		}
		if err != nil {
			return nil, err
		}
		if res, ok := v.(model.Resource); ok {
			out = append(out, res)
		}
	}
	return out, nil
}

type gatewaySecretsKey struct{}

// gatewaySecrets maps the SDS names the gateway's filter chains use to
// their Secrets.
func gatewaySecrets(gw *pushcontext.IngressGateway) map[string]model.NamespacedName {
	chains := gatewayChains(gw, nil)
	out := make(map[string]model.NamespacedName, len(chains))
	for _, c := range chains {
		out[c.secretName] = c.tls.Secret
	}
	return out
}

// forgetUnused drops what was built for names the gateway no longer uses.
func (g *SecretGenerator) forgetUnused(used map[string]model.NamespacedName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for name := range g.built {
		if _, ok := used[name]; !ok {
			delete(g.built, name)
		}
	}
}

// build returns the SDS resource of one Secret, or noSecret.
func (g *SecretGenerator) build(push *pushcontext.PushContext, name string, ref model.NamespacedName) (any, error) {
	sec := push.Secret(ref)
	if sec == nil {
		return noSecret{}, nil
	}
	g.mu.Lock()
	b, ok := g.built[name]
	g.mu.Unlock()
	if ok && b.secret == sec {
		return b.value, nil
	}
	v, err := g.buildSecret(push, name, ref, sec)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	if g.built == nil {
		g.built = map[string]builtSecret{}
	}
	g.built[name] = builtSecret{secret: sec, value: v}
	g.mu.Unlock()
	return v, nil
}

// buildSecret makes the resource. The push context has already refused
// Secrets it cannot use; the key pair is checked again (once per Secret
// object) because a certificate Envoy cannot load would fail the whole
// listener, taking every host down with it.
func (g *SecretGenerator) buildSecret(push *pushcontext.PushContext, name string, ref model.NamespacedName, sec *model.Secret) (any, error) {
	if err := checkKeyPair(sec); err != nil {
		key := model.ConfigKey{Kind: model.KindSecret, Namespace: ref.Namespace, Name: ref.Name}
		lrProblems{logger: g.opts.Logger, push: push}.report(key, "not served over SDS: "+err.Error())
		return noSecret{}, nil
	}
	secret := &tlsv3.Secret{
		Name: name,
		Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: sec.Cert}},
			PrivateKey:       &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: sec.PrivateKey}},
		}},
	}
	b, err := lrMarshal.Marshal(secret)
	if err != nil {
		return nil, fmt.Errorf("envoygen: marshal secret %s: %w", name, err)
	}
	return model.Resource{Name: name, Resource: &anypb.Any{TypeUrl: SecretType, Value: b}}, nil
}

// checkKeyPair refuses a certificate and key Envoy could not load: one bad
// certificate would fail the whole listener or cluster that uses it.
func checkKeyPair(sec *model.Secret) error {
	if _, err := tls.X509KeyPair(sec.Cert, sec.PrivateKey); err != nil {
		return fmt.Errorf("tls.crt and tls.key are not a usable key pair: %v", err)
	}
	return nil
}
