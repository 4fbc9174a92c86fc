package xds

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// The convergence test's Secrets, and the identities its clients prove:
// SDS serves only a proxy that proved who it is, so every client proves
// the namespace it claims, and the Secrets its clusters and the gateway's
// listeners name reach it over the same ADS stream as the rest.

const (
	// convCredential is the Secret that DestinationRules name as their
	// credentialName. It exists in every namespace that has proxies, as
	// the pair and ca.crt a rule needs, and steps only rotate it: a
	// cluster that names a Secret the server never sends warms for ever
	// (initial_fetch_timeout 0), and a long-lived Envoy then rightly keeps
	// the cluster's previous version active where a fresh one has none,
	// so the two could not be compared.
	convCredential = "cred"
	// convIngressSecret holds the certificate of Ingress apps/web's TLS
	// entries. It comes and goes and turns unusable: an entry whose Secret
	// is missing or broken is dropped, and nothing names it then.
	convIngressSecret = "web-tls"
)

// convPEMs are two certificate and key pairs. They are made once per test
// binary: which one a step takes is the seed's, their bytes are not (both
// clients of a pair are served the same ones).
var convPEMs = sync.OnceValue(func() [2]scopePEM {
	var out [2]scopePEM
	for i := range out {
		p, err := newScopePEM("a.example.com")
		if err != nil {
			panic(err)
		}
		out[i] = p
	}
	return out
})

// convCredentialSecret is convCredential in ns, from pair i.
func convCredentialSecret(ns string, i int) *model.Secret {
	p := convPEMs()[i]
	return &model.Secret{Name: convCredential, Namespace: ns, Type: "kubernetes.io/tls", Cert: p.cert, PrivateKey: p.key, CACert: p.cert}
}

// convCredentialNamespaces are where proxies read convCredential from: each
// sidecar's namespace, and the gateway's.
var convCredentialNamespaces = []string{convApps, convWeb, convRoot}

func convSecretStep(r *rand.Rand) convStep {
	if chance(r, 2) {
		ns, pair := oneOf(r, convCredentialNamespaces...), r.IntN(2)
		sec := convCredentialSecret(ns, pair)
		return convStep{desc: fmt.Sprintf("Secret %s/%s: pair %d with ca.crt", ns, convCredential, pair),
			apply: func(st model.Store) { st.UpsertSecret(sec) }}
	}
	key := model.NamespacedName{Namespace: convApps, Name: convIngressSecret}
	pems := convPEMs()
	sec := &model.Secret{Name: key.Name, Namespace: key.Namespace, Type: "kubernetes.io/tls"}
	var desc string
	switch r.IntN(5) {
	case 0:
		return convStep{desc: "delete Secret " + key.String(), apply: func(st model.Store) { st.DeleteSecret(key) }}
	case 1, 2:
		pair := r.IntN(2)
		sec.Cert, sec.PrivateKey, desc = pems[pair].cert, pems[pair].key, fmt.Sprintf("pair %d", pair)
	case 3:
		sec.Cert, sec.PrivateKey, desc = pems[0].cert, pems[1].key, "a certificate and another pair's key"
	default:
		sec.Cert, desc = pems[0].cert, "a certificate without a key"
	}
	return convStep{desc: fmt.Sprintf("Secret %s: %s", key, desc), apply: func(st model.Store) { st.UpsertSecret(sec) }}
}

// convIdentityKey is the stream metadata in which a test client names the
// identity it proves, "namespace/service-account"; convAuthenticate takes
// it as proven, as the server takes a verified client certificate.
const convIdentityKey = "x-convergence-identity"

func convAuthenticate(ctx context.Context) (*model.Identity, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(convIdentityKey)
	if len(v) == 0 {
		return nil, nil
	}
	ns, sa, _ := strings.Cut(v[0], "/")
	return &model.Identity{TrustDomain: "cluster.local", Namespace: ns, ServiceAccount: sa}, nil
}

// provingConn opens every stream as the identity it names.
type provingConn struct {
	*grpc.ClientConn
	identity string
}

func (c provingConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, convIdentityKey, c.identity)
	return c.ClientConn.NewStream(ctx, desc, method, opts...)
}
