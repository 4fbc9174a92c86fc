package controllers

import (
	"bytes"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// Data keys of a Secret that holds a TLS certificate: the kubernetes.io/tls
// keys, and Istio's generic ones, which it also accepts for gateways.
const (
	secretKeyCert          = corev1.TLSCertKey       // tls.crt
	secretKeyPrivateKey    = corev1.TLSPrivateKeyKey // tls.key
	secretKeyCACert        = "ca.crt"
	secretKeyGenericCert   = "cert"
	secretKeyGenericKey    = "key"
	secretKeyGenericCACert = "cacert"
)

// tlsSecretKeys are every data key ConvertSecret reads; the informer's
// transform keeps only these.
var tlsSecretKeys = []string{
	secretKeyCert, secretKeyPrivateKey, secretKeyCACert,
	secretKeyGenericCert, secretKeyGenericKey, secretKeyGenericCACert,
}

// ConvertSecret turns a Secret into the model's TLS view of it. The
// kubernetes.io/tls keys win over Istio's generic ones, each on its own
// (tls.crt over cert, tls.key over key, ca.crt over cacert). stringData,
// which only files carry (the API server folds it into data), wins over
// data as it does on the server. ok is false when the Secret holds none of
// the keys, so it cannot be a certificate; a Secret with only some of them
// is kept, and the translation reports what is missing. PEM bytes are
// shared with the object, not copied or parsed.
func ConvertSecret(sec *corev1.Secret) (out *model.Secret, ok bool) {
	out = &model.Secret{
		Name:       sec.Name,
		Namespace:  sec.Namespace,
		Type:       string(sec.Type),
		Cert:       secretValue(sec, secretKeyCert, secretKeyGenericCert),
		PrivateKey: secretValue(sec, secretKeyPrivateKey, secretKeyGenericKey),
		CACert:     secretValue(sec, secretKeyCACert, secretKeyGenericCACert),
	}
	ok = out.Cert != nil || out.PrivateKey != nil || out.CACert != nil
	return out, ok
}

// secretValue returns the first of keys the Secret has, nil if none.
func secretValue(sec *corev1.Secret, keys ...string) []byte {
	for _, k := range keys {
		if v, ok := sec.StringData[k]; ok {
			return []byte(v)
		}
		if v, ok := sec.Data[k]; ok {
			if v == nil {
				v = []byte{} // present but empty is not absent
			}
			return v
		}
	}
	return nil
}

// sameSecret reports whether two conversions hold the same certificate,
// so that a Secret whose metadata alone changed causes no SDS push.
func sameSecret(a, b *model.Secret) bool {
	return a.Name == b.Name && a.Namespace == b.Namespace && a.Type == b.Type &&
		sameBytes(a.Cert, b.Cert) && sameBytes(a.PrivateKey, b.PrivateKey) && sameBytes(a.CACert, b.CACert)
}

// sameBytes is bytes.Equal that also tells absent (nil) from empty.
func sameBytes(a, b []byte) bool {
	return (a == nil) == (b == nil) && bytes.Equal(a, b)
}
