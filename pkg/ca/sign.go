package ca

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"time"
)

// MaxCSRBytes bounds the CSR we parse. A real CSR is about 1 KiB; 64 KiB
// leaves room for any honest one and stops a caller from making us parse
// megabytes.
const MaxCSRBytes = 64 << 10

// Kinds of signing error. Their Label is the `error` label of
// citadel_server_csr_sign_err_count, spelled as istiod spells it.
var (
	// ErrCSR: the CSR is malformed, oversized, badly signed, has a weak
	// key, or names an identity other than the one proven.
	ErrCSR = &SignErrorKind{Label: "CSR_ERROR"}
	// ErrTTL: the requested lifetime is above the maximum.
	ErrTTL = &SignErrorKind{Label: "TTL_ERROR"}
	// ErrCertGen: the CA itself failed to sign (never the caller's fault).
	ErrCertGen = &SignErrorKind{Label: "CERT_GEN_ERROR"}
)

// SignErrorKind classifies a SignError; compare with errors.Is.
type SignErrorKind struct{ Label string }

func (k *SignErrorKind) Error() string { return k.Label }

// SignError is why Sign refused. Its message is safe to return to the
// caller: it names the problem, never key material.
type SignError struct {
	Kind *SignErrorKind
	Err  error
}

func (e *SignError) Error() string { return e.Err.Error() }

// Is makes errors.Is(err, ErrCSR) and the like work.
func (e *SignError) Is(target error) bool { return target == e.Kind }

func (e *SignError) Unwrap() error { return e.Err }

func signErr(kind *SignErrorKind, format string, args ...any) error {
	return &SignError{Kind: kind, Err: fmt.Errorf(format, args...)}
}

// Certificate is what Sign issued.
type Certificate struct {
	Leaf *x509.Certificate
	// ChainPEM is the leaf, then the intermediates (for a plugged-in CA),
	// one PEM certificate per element; the root is not in it (RootPEM).
	ChainPEM []string
}

// Sign issues a workload certificate for id from a PEM CSR:
//   - the CSR must be well formed, at most MaxCSRBytes, signed by its key,
//     and carry a strong enough key (RSA ≥ 2048, ECDSA P-256/P-384);
//   - if the CSR names anything (URI, DNS, IP or e-mail SANs) it must name
//     exactly id: istiod silently signs the proven identity instead, but a
//     clear refusal tells a misconfigured client what is wrong;
//   - ttl ≤ 0 means the default (24 h); above the maximum is refused, as
//     istiod refuses it, rather than clamped behind the caller's back.
//
// A CA whose chain has expired, or is not valid yet, refuses (ErrCertGen,
// wrapping ErrCANotValid); a leaf never outlives any certificate of the
// chain.
//
// The leaf has id as its only (URI) SAN, an empty subject (so the SAN is
// critical, per the X.509-SVID spec), and client and server auth usages.
func (a *Authority) Sign(csrPEM []byte, id Identity, ttl time.Duration) (*Certificate, error) {
	if id.TrustDomain != a.opts.TrustDomain {
		return nil, signErr(ErrCSR, "identity %s is not in trust domain %q", id, a.opts.TrustDomain)
	}
	csr, err := parseCSR(csrPEM)
	if err != nil {
		return nil, err
	}
	if err := checkCSRNames(csr, id); err != nil {
		return nil, err
	}
	switch {
	case ttl <= 0:
		ttl = a.opts.DefaultCertTTL
	case ttl > a.opts.MaxCertTTL:
		return nil, signErr(ErrTTL, "requested TTL %s is greater than the max allowed TTL %s", ttl, a.opts.MaxCertTTL)
	}

	notBefore, notAfter, err := a.leafValidity(time.Now(), ttl)
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, signErr(ErrCertGen, "serial number: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  false,
		URIs:                  []*url.URL{id.URL()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, csr.PublicKey, a.signer)
	if err != nil {
		return nil, signErr(ErrCertGen, "sign: %v", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, signErr(ErrCertGen, "parse the signed certificate: %v", err)
	}
	chain := make([]string, 0, 1+len(a.chainPEM))
	chain = append(chain, string(encodeCertificate(leaf)))
	chain = append(chain, a.chainPEM...)
	return &Certificate{Leaf: leaf, ChainPEM: chain}, nil
}

// parseCSR decodes and checks a PEM CSR: size, PEM type, DER, signature and
// key strength.
func parseCSR(csrPEM []byte) (*x509.CertificateRequest, error) {
	if len(csrPEM) == 0 {
		return nil, signErr(ErrCSR, "the CSR is empty")
	}
	if len(csrPEM) > MaxCSRBytes {
		return nil, signErr(ErrCSR, "the CSR is %d bytes, more than the limit of %d", len(csrPEM), MaxCSRBytes)
	}
	block, _ := pem.Decode(csrPEM)
	if block == nil {
		return nil, signErr(ErrCSR, "the CSR is not PEM encoded")
	}
	if block.Type != "CERTIFICATE REQUEST" && block.Type != "NEW CERTIFICATE REQUEST" {
		return nil, signErr(ErrCSR, "the CSR's PEM block is of type %q, not CERTIFICATE REQUEST", block.Type)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, signErr(ErrCSR, "the CSR cannot be parsed: %v", err)
	}
	// The signature proves the caller holds the private key; without this
	// check anyone could get a certificate for someone else's public key.
	if err := csr.CheckSignature(); err != nil {
		return nil, signErr(ErrCSR, "the CSR's signature is invalid: %v", err)
	}
	if err := checkKeyStrength(csr.PublicKey); err != nil {
		return nil, signErr(ErrCSR, "the CSR's key is refused: %v", err)
	}
	return csr, nil
}

// checkCSRNames refuses a CSR that asks for any name but id.
func checkCSRNames(csr *x509.CertificateRequest, id Identity) error {
	want := id.String()
	for _, u := range csr.URIs {
		if u.String() != want {
			return signErr(ErrCSR, "the CSR asks for identity %q, but the caller is %q", u.String(), want)
		}
	}
	var other []string
	other = append(other, csr.DNSNames...)
	other = append(other, csr.EmailAddresses...)
	for _, ip := range csr.IPAddresses {
		other = append(other, ip.String())
	}
	if len(other) > 0 {
		return signErr(ErrCSR, "the CSR asks for names %q; this CA issues only the SPIFFE identity %q", other, want)
	}
	return nil
}
