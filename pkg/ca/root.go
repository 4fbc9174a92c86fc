package ca

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Secret names and keys, as Istio spells them, so that a cluster moved from
// istiod to meshpilot (or back) keeps its root.
const (
	// SelfSignedSecretName holds the self-signed root: istiod's
	// istio-ca-secret, of type istio.io/ca-root.
	SelfSignedSecretName = "istio-ca-secret"
	// PluggedSecretName holds an operator's CA (Istio's "plug in CA
	// certificates"); when it exists it wins over SelfSignedSecretName.
	PluggedSecretName = "cacerts"

	CACertKey    = "ca-cert.pem"    // the signing certificate
	CAKeyKey     = "ca-key.pem"     // its private key
	CertChainKey = "cert-chain.pem" // signing certificate, then intermediates (may end with the root)
	RootCertKey  = "root-cert.pem"  // the root(s) that workloads trust
	privKeyKey   = "key.pem"        // written empty, as istiod does

	caSecretType corev1.SecretType = "istio.io/ca-root"
)

// Defaults, as istiod's.
const (
	DefaultTrustDomain = "cluster.local"
	DefaultCertTTL     = 24 * time.Hour            // istiod's DEFAULT_WORKLOAD_CERT_TTL
	DefaultMaxCertTTL  = 90 * 24 * time.Hour       // istiod's MAX_WORKLOAD_CERT_TTL
	DefaultRootTTL     = 10 * 365 * 24 * time.Hour // istiod's CITADEL_SELF_SIGNED_CA_CERT_TTL
	// clockSkew backdates NotBefore, so a peer whose clock is a little
	// behind ours does not reject a certificate issued a moment ago.
	clockSkew = time.Minute
)

// Source says where an Authority's signing key came from.
type Source string

const (
	SourceSelfSigned Source = SelfSignedSecretName
	SourcePlugged    Source = PluggedSecretName
	SourceMemory     Source = "memory" // NewSelfSigned: tests and benchmarks
)

// Options configure an Authority. Zero fields take the defaults above.
type Options struct {
	// Namespace holds the CA Secrets (istio-system, usually). Required by
	// LoadOrCreate.
	Namespace      string
	TrustDomain    string
	DefaultCertTTL time.Duration
	MaxCertTTL     time.Duration
	// RootTTL is the lifetime of a self-signed root this CA creates.
	RootTTL time.Duration
	Logger  *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.TrustDomain == "" {
		o.TrustDomain = DefaultTrustDomain
	}
	if o.DefaultCertTTL <= 0 {
		o.DefaultCertTTL = DefaultCertTTL
	}
	if o.MaxCertTTL <= 0 {
		o.MaxCertTTL = DefaultMaxCertTTL
	}
	if o.RootTTL <= 0 {
		o.RootTTL = DefaultRootTTL
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Authority is a signing key with its certificate, the chain up to the root,
// and the root. It is immutable, so it is safe for concurrent use.
type Authority struct {
	opts   Options
	source Source
	signer crypto.Signer
	cert   *x509.Certificate
	// chain is what sits between a leaf and the root, leaf side first: the
	// signing certificate when it is not itself a root, then intermediates.
	chain    []*x509.Certificate
	chainPEM []string
	// signerRoot is the root that cert chains up to: a leaf is only as
	// valid as it (see signingPath).
	signerRoot *x509.Certificate
	roots      []*x509.Certificate
	rootPEM    []byte
	rootPool   *x509.CertPool

	// offPath is what of cert-chain.pem, and of ca-cert.pem after its
	// first certificate, is ignored (see pathToRoot), to be named in a
	// warning when the files are loaded.
	offPath []offPathCert
}

// Source is where the signing key came from.
func (a *Authority) Source() Source { return a.source }

// TrustDomain is the trust domain of every identity this CA signs.
func (a *Authority) TrustDomain() string { return a.opts.TrustDomain }

// RootPEM is the root certificate(s) to publish (istio-ca-root-cert,
// root-cert.pem) and to return as the last element of a cert_chain: the
// certificates of root-cert.pem alone, each encoded anew.
func (a *Authority) RootPEM() []byte { return bytes.Clone(a.rootPEM) }

// RootPool holds the roots, for verifying certificates this CA issued.
func (a *Authority) RootPool() *x509.CertPool { return a.rootPool }

// RootExpiry is when the first root expires.
func (a *Authority) RootExpiry() time.Time { return firstExpiry(a.roots) }

// CertChainExpiry is when the first certificate between a leaf and the
// root expires: the signing certificate or an intermediate. When the
// signing certificate is the root, that is the root's expiry.
func (a *Authority) CertChainExpiry() time.Time {
	return firstExpiry(append([]*x509.Certificate{a.cert}, a.chain...))
}

// AuthorityProvider gives the Authority in use at the moment of the call.
// A Keeper is one, replacing its Authority when the CA Secrets change; a
// fixed *Authority is its own.
type AuthorityProvider interface {
	// Current is nil while no Authority is loaded yet.
	Current() *Authority
}

// Current makes a fixed Authority an AuthorityProvider.
func (a *Authority) Current() *Authority { return a }

// sameKeyMaterial says whether b signs with the same certificate, hands
// out the same chain and publishes the same root as a, so a reload that
// reads unchanged Secrets replaces (and re-announces) nothing.
func (a *Authority) sameKeyMaterial(b *Authority) bool {
	return a != nil && b != nil && a.source == b.source && a.cert.Equal(b.cert) &&
		bytes.Equal(a.rootPEM, b.rootPEM) && slices.Equal(a.chainPEM, b.chainPEM)
}

// NewSelfSigned creates an Authority with a fresh self-signed root that
// lives only in memory: for tests, benchmarks and tools. Use LoadOrCreate in
// a control plane, so that replicas and restarts share one root.
func NewSelfSigned(opts Options) (*Authority, error) {
	opts = opts.withDefaults()
	certPEM, keyPEM, err := generateRoot(opts)
	if err != nil {
		return nil, err
	}
	return newAuthority(opts, SourceMemory, certPEM, keyPEM, nil, nil, time.Now())
}

// NewFromPEM builds an Authority from Istio's four files (the contents of
// the cacerts Secret). certChain and root may be empty when caCert is a
// self-signed root.
func NewFromPEM(opts Options, caCert, caKey, certChain, root []byte) (*Authority, error) {
	opts = opts.withDefaults()
	a, err := newAuthority(opts, SourcePlugged, caCert, caKey, certChain, root, time.Now())
	if err != nil {
		return nil, err
	}
	a.warnOffPath(opts.Logger)
	return a, nil
}

// generateRoot makes a self-signed root with an ECDSA P-256 key. We pick
// P-256 over istiod's RSA 2048: signing is an order of magnitude cheaper
// (see BenchmarkSign), certificates and handshakes are smaller, and every
// peer of the mesh (Envoy, ztunnel, grpc-go) verifies it. A root migrated
// from istiod stays RSA: loading accepts either.
func generateRoot(opts Options) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{opts.TrustDomain}, CommonName: "meshpilot root CA"},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(opts.RootTTL),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = encodePrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return encodeCertificate(cert), keyPEM, nil
}

// randomSerial is a 128-bit random serial number, as RFC 5280 and the CA/B
// baseline ask (at least 64 bits of entropy).
func randomSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}

// newAuthority checks the key material as of now, the moment it is loaded:
// a parameter, so that a test can load a CA whose certificates have expired
// since, as a running CA's do.
func newAuthority(opts Options, source Source, caCertPEM, caKeyPEM, chainPEM, rootPEM []byte, now time.Time) (*Authority, error) {
	if len(caCertPEM) == 0 || len(caKeyPEM) == 0 {
		return nil, fmt.Errorf("%s and %s are both required", CACertKey, CAKeyKey)
	}
	certs, err := parseCertificates(caCertPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CACertKey, err)
	}
	// The first certificate signs, as in Istio. Istio drops the others
	// unseen; they are offered for the path to the root below, beside
	// cert-chain.pem's, and named in a warning if off it, so that none is
	// lost without a word.
	cert, caCertRest := certs[0], certs[1:]
	key, err := parsePrivateKey(caKeyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CAKeyKey, err)
	}
	if !publicKeysEqual(cert, key) {
		if len(caCertRest) > 0 {
			return nil, fmt.Errorf("%s does not hold the private key of the first certificate of %s (%s): the signing certificate must come first",
				CAKeyKey, CACertKey, cert.Subject)
		}
		return nil, fmt.Errorf("%s does not hold the private key of %s", CAKeyKey, CACertKey)
	}
	if !cert.IsCA || (cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0) {
		return nil, fmt.Errorf("%s (%s) may not sign certificates: it is not a CA certificate with the certSign key usage", CACertKey, cert.Subject)
	}
	if now.After(cert.NotAfter) {
		return nil, fmt.Errorf("%s (%s) expired at %s", CACertKey, cert.Subject, cert.NotAfter.Format(time.RFC3339))
	}

	// Without root-cert.pem the signing certificate must be the root itself.
	var roots []*x509.Certificate
	if len(bytes.TrimSpace(rootPEM)) == 0 {
		if !bytes.Equal(cert.RawIssuer, cert.RawSubject) || cert.CheckSignatureFrom(cert) != nil {
			return nil, fmt.Errorf("%s (%s) is not self-signed, so %s is required", CACertKey, cert.Subject, RootCertKey)
		}
		roots = []*x509.Certificate{cert}
	} else if roots, err = parseCertificates(rootPEM); err != nil {
		return nil, fmt.Errorf("%s: %w", RootCertKey, err)
	}
	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r)
	}

	var offered []*x509.Certificate
	if len(bytes.TrimSpace(chainPEM)) > 0 {
		if offered, err = parseCertificates(chainPEM); err != nil {
			return nil, fmt.Errorf("%s: %w", CertChainKey, err)
		}
	}
	path, err := pathToRoot(cert, slices.Concat(caCertRest, offered), pool, now)
	if err != nil {
		return nil, err
	}
	// The chain handed out with each leaf is the path without its root:
	// the signing certificate unless it is a root, then the
	// intermediates, leaf side first, whatever cert-chain.pem's order.
	chain := path[:len(path)-1]

	a := &Authority{
		opts: opts, source: source, signer: key, cert: cert,
		chain: chain, signerRoot: path[len(path)-1], roots: roots, rootPool: pool,
		offPath: slices.Concat(offPath(CACertKey, caCertRest, path, roots), offPath(CertChainKey, offered, path, roots)),
		// Encoded anew from the parsed roots, never the operator's file:
		// it is published to every namespace and every workload, and
		// whatever else the file holds (comments, PEM headers) must not
		// go with it.
		rootPEM: encodeCertificates(roots),
	}
	for _, c := range chain {
		a.chainPEM = append(a.chainPEM, string(encodeCertificate(c)))
	}
	return a, nil
}

// LoadOrCreate returns the Authority of the CA namespace:
//   - from the Secret cacerts when it exists (a plugged-in CA; an invalid
//     one is an error, never a silent fall-back to a self-signed root);
//   - else from istio-ca-secret;
//   - else it creates istio-ca-secret with a new self-signed root. When
//     replicas race, the API server lets exactly one Create succeed; the
//     others get AlreadyExists and load the winner's root, so all end up
//     with the same one.
func LoadOrCreate(ctx context.Context, kube kubernetes.Interface, opts Options) (*Authority, error) {
	opts = opts.withDefaults()
	if opts.Namespace == "" {
		return nil, errors.New("ca: Options.Namespace is required")
	}
	secrets := kube.CoreV1().Secrets(opts.Namespace)

	plugged, err := secrets.Get(ctx, PluggedSecretName, metav1.GetOptions{})
	switch {
	case err == nil:
		a, err := startingAuthority(opts, plugged, time.Now())
		if err != nil {
			return nil, err
		}
		a.warnOffPath(opts.Logger)
		opts.Logger.Info("CA uses the plugged-in CA", "secret", opts.Namespace+"/"+PluggedSecretName,
			"signer", a.cert.Subject.String(), "rootExpiry", a.RootExpiry())
		return a, nil
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("get Secret %s/%s: %w", opts.Namespace, PluggedSecretName, err)
	}

	if a, err := loadSelfSigned(ctx, kube, opts); err == nil || !apierrors.IsNotFound(err) {
		return a, err
	}

	certPEM, keyPEM, err := generateRoot(opts)
	if err != nil {
		return nil, err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SelfSignedSecretName, Namespace: opts.Namespace},
		Type:       caSecretType,
		// The same five keys istiod writes; the empty ones keep tools that
		// read them from tripping over a missing key.
		Data: map[string][]byte{
			CACertKey: certPEM, CAKeyKey: keyPEM,
			CertChainKey: {}, privKeyKey: {}, RootCertKey: {},
		},
	}
	if _, err := secrets.Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create Secret %s/%s: %w", opts.Namespace, SelfSignedSecretName, err)
		}
		opts.Logger.Info("another replica created the CA root first; using it", "secret", opts.Namespace+"/"+SelfSignedSecretName)
		return loadSelfSigned(ctx, kube, opts)
	}
	a, err := newAuthority(opts, SourceSelfSigned, certPEM, keyPEM, nil, nil, time.Now())
	if err != nil {
		return nil, err
	}
	opts.Logger.Info("CA created a self-signed root", "secret", opts.Namespace+"/"+SelfSignedSecretName, "rootExpiry", a.RootExpiry())
	return a, nil
}

// loadSelfSigned reads istio-ca-secret; a NotFound error is returned as is.
func loadSelfSigned(ctx context.Context, kube kubernetes.Interface, opts Options) (*Authority, error) {
	s, err := kube.CoreV1().Secrets(opts.Namespace).Get(ctx, SelfSignedSecretName, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, err
		}
		return nil, fmt.Errorf("get Secret %s/%s: %w", opts.Namespace, SelfSignedSecretName, err)
	}
	a, err := startingAuthority(opts, s, time.Now())
	if err != nil {
		return nil, err
	}
	a.warnOffPath(opts.Logger)
	opts.Logger.Info("CA loaded its root", "secret", opts.Namespace+"/"+SelfSignedSecretName, "rootExpiry", a.RootExpiry())
	return a, nil
}

// authorityFromSecret builds the Authority that one of the two CA Secrets
// holds, its source told by its name, checked as of now (see
// newAuthority). Both keep Istio's four keys.
func authorityFromSecret(opts Options, s *corev1.Secret, now time.Time) (*Authority, error) {
	source, what := SourceSelfSigned, "CA Secret"
	if s.Name == PluggedSecretName {
		source, what = SourcePlugged, "plugged-in CA Secret"
	}
	a, err := newAuthority(opts, source, s.Data[CACertKey], s.Data[CAKeyKey], s.Data[CertChainKey], s.Data[RootCertKey], now)
	if err != nil {
		return nil, fmt.Errorf("%s %s/%s: %w", what, s.Namespace, s.Name, err)
	}
	return a, nil
}
