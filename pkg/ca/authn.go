package ca

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Caller is a proven identity.
type Caller struct {
	Identity Identity
	// Method is the authenticator that proved it ("token", "certificate").
	Method string
	// The Pod a pod-bound ServiceAccount token was issued for, from the
	// TokenReview's user extra; empty for other proofs. Impersonation needs
	// them to find the caller's node.
	PodName, PodUID, NodeName string
}

// Authenticator proves who is calling from a gRPC request's context. The
// server tries its authenticators in order and takes the first success.
type Authenticator interface {
	// Name is short, for logs and error messages ("token", "certificate").
	Name() string
	// Authenticate returns the caller, or ErrNoCredential when the request
	// carries no credential of this kind (the next authenticator is tried),
	// or another error saying why the credential was refused.
	Authenticate(ctx context.Context) (*Caller, error)
}

var (
	// ErrNoCredential: the request carries no credential of this kind.
	ErrNoCredential = errors.New("no credential presented")
	// ErrUnavailable: the credential could not be checked now (the API
	// server is unreachable, overloaded, or timed out). It is not the
	// caller's fault, so the caller gets codes.Unavailable and retries. An
	// API server that refuses the CA's own TokenReview is ErrCAForbidden
	// instead: retrying cannot help.
	ErrUnavailable = errors.New("cannot check the credential now")
	// ErrNoIdentity: the credential is valid but names no workload
	// identity this CA can issue.
	ErrNoIdentity = errors.New("the credential names no workload identity")
)

// TokenReview user extras that bind a token to a Pod (Kubernetes sets them
// for tokens requested for a Pod, as the kubelet's projected tokens are).
const (
	extraPodName  = "authentication.kubernetes.io/pod-name"
	extraPodUID   = "authentication.kubernetes.io/pod-uid"
	extraNodeName = "authentication.kubernetes.io/node-name"
)

// DefaultAudience is the audience Istio's agents and ztunnel request their
// tokens for (istiod's TOKEN_AUDIENCES default).
const DefaultAudience = "istio-ca"

// maxTokenBytes bounds the bearer token we send to TokenReview; real
// ServiceAccount tokens are 1–2 KiB.
const maxTokenBytes = 16 << 10

// TokenOptions configure a TokenAuthenticator.
type TokenOptions struct {
	// TrustDomain of the identities, as the Authority's.
	TrustDomain string
	// Audiences a token must be for; default [DefaultAudience].
	Audiences []string
	// AllowAPIServerAudience also accepts tokens the API server accepts for
	// its own audiences (its --api-audiences, by default its issuer), when
	// they are refused for Audiences. This is istiod's first-party-jwt
	// mode; istiod's default (third-party-jwt) refuses such tokens, and so
	// does ours. Such a token can be replayed to any service that accepts
	// API server tokens, so leave it off unless old clients need it.
	AllowAPIServerAudience bool
	Logger                 *slog.Logger
}

// TokenAuthenticator proves a caller by its Kubernetes ServiceAccount token,
// sent as gRPC metadata `authorization: Bearer <jwt>` and checked by the
// API server with a TokenReview. Signature, expiry, audience and that the
// ServiceAccount (and the Pod, for a pod-bound token) still exist are all
// the API server's to check; we never parse the JWT ourselves.
type TokenAuthenticator struct {
	kube kubernetes.Interface
	opts TokenOptions
}

// NewTokenAuthenticator needs a client allowed to create tokenreviews
// (authentication.k8s.io).
func NewTokenAuthenticator(kube kubernetes.Interface, opts TokenOptions) *TokenAuthenticator {
	if opts.TrustDomain == "" {
		opts.TrustDomain = DefaultTrustDomain
	}
	if len(opts.Audiences) == 0 {
		opts.Audiences = []string{DefaultAudience}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &TokenAuthenticator{kube: kube, opts: opts}
}

func (*TokenAuthenticator) Name() string { return "token" }

func (a *TokenAuthenticator) Authenticate(ctx context.Context) (*Caller, error) {
	token, err := bearerToken(ctx)
	if err != nil {
		return nil, err
	}
	status, err := a.review(ctx, token, a.opts.Audiences)
	if err != nil && a.opts.AllowAPIServerAudience && !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrCAForbidden) {
		status, err = a.review(ctx, token, nil)
	}
	if err != nil {
		return nil, err
	}
	id, err := identityFromUser(a.opts.TrustDomain, status.User)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoIdentity, err)
	}
	extra := func(k string) string {
		if v := status.User.Extra[k]; len(v) == 1 {
			return v[0]
		}
		return ""
	}
	return &Caller{
		Identity: id, Method: a.Name(),
		PodName: extra(extraPodName), PodUID: extra(extraPodUID), NodeName: extra(extraNodeName),
	}, nil
}

// review asks the API server about token. audiences nil means the API
// server's own.
func (a *TokenAuthenticator) review(ctx context.Context, token string, audiences []string) (*authnv1.TokenReviewStatus, error) {
	tr, err := a.kube.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, apiCheckFailed("create tokenreviews.authentication.k8s.io", "TokenReview", err)
	}
	if !tr.Status.Authenticated {
		// The API server's reason (expired, bad signature, wrong audience,
		// ServiceAccount gone) goes to our log only: the caller learns that
		// its token was refused and what we require, which is all it needs.
		a.opts.Logger.Info("ServiceAccount token refused by TokenReview", "audiences", audiences, "reason", tr.Status.Error)
		if audiences == nil {
			return nil, errors.New("the ServiceAccount token is not valid (forged, expired, or its ServiceAccount or Pod is gone)")
		}
		return nil, fmt.Errorf("the ServiceAccount token is not valid for audience %q (forged, expired, for another audience, or its ServiceAccount or Pod is gone)",
			audiences)
	}
	// An API server that ignores spec.audiences would report none back; we
	// then cannot know the token was meant for us, so we refuse it.
	if audiences != nil && !slices.ContainsFunc(tr.Status.Audiences, func(s string) bool { return slices.Contains(audiences, s) }) {
		return nil, fmt.Errorf("the API server did not confirm the token is for audience %q", audiences)
	}
	return &tr.Status, nil
}

// bearerToken reads `authorization: Bearer <token>` from the incoming gRPC
// metadata.
func bearerToken(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	values := md.Get("authorization")
	switch len(values) {
	case 0:
		return "", ErrNoCredential
	case 1:
	default:
		return "", errors.New("more than one authorization header")
	}
	scheme, token, ok := strings.Cut(values[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", errors.New("the authorization header is not of the form \"Bearer <token>\"")
	}
	token = strings.TrimSpace(token)
	switch {
	case token == "":
		return "", errors.New("the bearer token is empty")
	case len(token) > maxTokenBytes:
		return "", fmt.Errorf("the bearer token is longer than %d bytes", maxTokenBytes)
	}
	return token, nil
}

// CertAuthenticator proves a caller by the client certificate of its TLS
// connection, for renewal: the certificate must chain to this CA's root,
// allow client auth, and carry exactly one SPIFFE identity of our trust
// domain. The TLS handshake has already proven the caller holds its key.
// It checks against the roots current at the time of the call.
type CertAuthenticator struct{ ca AuthorityProvider }

func NewCertAuthenticator(ca AuthorityProvider) *CertAuthenticator {
	return &CertAuthenticator{ca: ca}
}

func (*CertAuthenticator) Name() string { return "certificate" }

func (a *CertAuthenticator) Authenticate(ctx context.Context) (*Caller, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, ErrNoCredential
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return nil, ErrNoCredential
	}
	authority := a.ca.Current()
	if authority == nil {
		return nil, fmt.Errorf("%w: the CA is not loaded yet", ErrUnavailable)
	}
	certs := info.State.PeerCertificates
	// Verify here, whatever the listener's ClientAuth setting: a listener
	// that only requests (and does not verify) client certificates must not
	// turn any self-made certificate into an identity.
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{
		Roots: authority.RootPool(), Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, fmt.Errorf("the client certificate was not issued by this CA, or has expired: %v", err)
	}
	if len(certs[0].URIs) != 1 {
		return nil, fmt.Errorf("%w: the client certificate has %d URI SANs, want exactly one SPIFFE ID", ErrNoIdentity, len(certs[0].URIs))
	}
	id, err := ParseIdentity(certs[0].URIs[0].String())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoIdentity, err)
	}
	if id.TrustDomain != authority.TrustDomain() {
		return nil, fmt.Errorf("%w: the client certificate's identity %s is not in trust domain %q", ErrNoIdentity, id, authority.TrustDomain())
	}
	return &Caller{Identity: id, Method: a.Name()}, nil
}

// SA is the caller's ServiceAccount as namespace/name.
func (c *Caller) SA() types.NamespacedName {
	return types.NamespacedName{Namespace: c.Identity.Namespace, Name: c.Identity.ServiceAccount}
}
