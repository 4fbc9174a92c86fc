package ca

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
)

func createSA(t *testing.T, env *kubetest.Env, ns, name string) {
	t.Helper()
	_, err := env.Kube.CoreV1().ServiceAccounts(ns).Create(context.Background(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func createPod(t *testing.T, env *kubetest.Env, ns, name, sa, node string) *corev1.Pod {
	t.Helper()
	p, err := env.Kube.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			ServiceAccountName: sa, NodeName: node,
			Containers: []corev1.Container{{Name: "c", Image: "example.invalid/app"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// token asks the API server for a token of ns/sa for audiences (nil: the
// API server's own), bound to pod when it is not nil.
func token(t *testing.T, env *kubetest.Env, ns, sa string, audiences []string, pod *corev1.Pod) string {
	t.Helper()
	req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: audiences}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := env.Kube.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// resign re-signs a JWT with key (RS256), after edit changes its claims.
// With the API server's own key and no edit, the result must still be
// accepted: that is the control for the expired-token test.
func resign(t *testing.T, jwt string, key crypto.Signer, edit func(map[string]any)) string {
	t.Helper()
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %d parts", len(parts))
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	claims := map[string]any{}
	if err := json.Unmarshal(raw, &claims); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(claims)
	}
	raw, err = json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	signed := parts[0] + "." + base64.RawURLEncoding.EncodeToString(raw)
	sum := sha256.Sum256([]byte(signed))
	var sig []byte
	switch k := key.(type) {
	case *rsa.PrivateKey: // RS256
		sig, err = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, sum[:])
	case *ecdsa.PrivateKey: // ES256: r and s, 32 bytes each (RFC 7518 §3.4)
		var r, s *big.Int
		r, s, err = ecdsa.Sign(rand.Reader, k, sum[:])
		sig = append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...)
	default:
		t.Fatalf("cannot sign a JWT with %T", key)
	}
	if err != nil {
		t.Fatal(err)
	}
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// sameKindOfKey is a fresh key of the same type as k, for forgeries that
// differ from a genuine token only by who signed them.
func sameKindOfKey(t *testing.T, k crypto.Signer) crypto.Signer {
	t.Helper()
	switch k := k.(type) {
	case *rsa.PrivateKey:
		return rsaKey(t, k.N.BitLen())
	case *ecdsa.PrivateKey:
		return ecKey(t, k.Curve)
	}
	t.Fatalf("unexpected key type %T", k)
	return nil
}

func apiServerSigningKey(t *testing.T, env *kubetest.Env) crypto.Signer {
	t.Helper()
	b, err := os.ReadFile(env.ServiceAccountSigningKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	k, err := parsePrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func withBearer(tok string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+tok))
}
