package ca

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// minRSABits is the smallest RSA key we sign or sign with: below 2048 bits
// RSA is no longer considered safe (NIST SP 800-131A), and Istio's own
// agents never ask for less.
const minRSABits = 2048

// checkKeyStrength refuses keys too weak to carry a mesh identity. Allowed:
// RSA of at least 2048 bits, and ECDSA on P-256 or P-384 — the curves that
// Envoy (BoringSSL), ztunnel (rustls) and grpc-go all accept. Ed25519 and
// other curves are refused, because a certificate a peer cannot verify is
// worse than a clear refusal now.
func checkKeyStrength(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return fmt.Errorf("RSA key of %d bits is too weak: at least %d bits are required", k.N.BitLen(), minRSABits)
		}
		return nil
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384():
			return nil
		}
		return fmt.Errorf("ECDSA curve %s is not accepted: use P-256 or P-384", k.Curve.Params().Name)
	default:
		return fmt.Errorf("key type %T is not accepted: use RSA (2048 bits or more) or ECDSA P-256/P-384", pub)
	}
}

// parsePrivateKey reads the first private key in PEM data, in any of the
// encodings Istio's cacerts files use (PKCS#1, SEC 1, PKCS#8). Errors never
// quote the key material.
func parsePrivateKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	var (
		key any
		err error
	)
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("PEM block of type %q is not a private key", block.Type)
	}
	if err != nil {
		// The parser's detail is dropped: it could echo bytes of the key.
		return nil, fmt.Errorf("the %s block is not a valid key", block.Type)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("private key of type %T cannot sign", key)
	}
	if err := checkKeyStrength(signer.Public()); err != nil {
		return nil, err
	}
	return signer, nil
}

// encodePrivateKey is the PKCS#8 PEM of key, the encoding every consumer of
// istio-ca-secret understands.
func encodePrivateKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// parseCertificates reads every CERTIFICATE block in data, in order. Text
// around the blocks (comments, the subject= lines openssl writes) is
// ignored: callers keep the parsed certificates, never the file, so it
// goes no further. Refused:
//   - a block of another type: a key pasted into a certificate file must
//     not pass silently;
//   - a BEGIN line that starts no valid block (broken base64, an END line
//     of another type, an indented block). pem.Decode skips such a block
//     as text, and a root dropped that way would break every workload
//     that still trusts only it, in the middle of a rotation.
func parseCertificates(data []byte) ([]*x509.Certificate, error) {
	begins := bytes.Count(data, []byte("-----BEGIN"))
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block of type %q where a CERTIFICATE was expected", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
	}
	if len(certs) != begins {
		// Nothing of the broken block is quoted: it may be a key.
		return nil, fmt.Errorf("%d of %d PEM blocks are malformed (broken base64, an END line that does not match its BEGIN line, or indented)",
			begins-len(certs), begins)
	}
	if len(certs) == 0 {
		return nil, errors.New("no certificate found")
	}
	return certs, nil
}

func encodeCertificate(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// encodeCertificates is certs as PEM, one block each, in order.
func encodeCertificates(certs []*x509.Certificate) []byte {
	var b []byte
	for _, c := range certs {
		b = append(b, encodeCertificate(c)...)
	}
	return b
}

// publicKeysEqual reports whether key is the private half of cert's key.
func publicKeysEqual(cert *x509.Certificate, key crypto.Signer) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	pub, ok := cert.PublicKey.(equaler)
	return ok && pub.Equal(key.Public())
}
