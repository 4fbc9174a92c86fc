package ca

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testlog"
)

func TestLoadOrCreate(t *testing.T) {
	t.Parallel()
	env := kubetest.StartWithoutCRDs(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("replicas racing to create the root end with one", func(t *testing.T) {
		ns := env.Namespace(t, "ca-race")
		var logs testlog.Buffer
		logger := slog.New(slog.NewTextHandler(&logs, nil))
		const replicas = 4
		var wg sync.WaitGroup
		roots := make([][]byte, replicas)
		errs := make([]error, replicas)
		for i := range replicas {
			wg.Go(func() {
				a, err := LoadOrCreate(ctx, env.Kube, Options{Namespace: ns, Logger: logger})
				if err == nil {
					roots[i] = a.RootPEM()
				}
				errs[i] = err
			})
		}
		wg.Wait()
		for i := range replicas {
			if errs[i] != nil {
				t.Fatalf("replica %d: %v", i, errs[i])
			}
			if !bytes.Equal(roots[i], roots[0]) {
				t.Fatalf("replica %d has another root than replica 0", i)
			}
		}
		s, err := env.Kube.CoreV1().Secrets(ns).Get(ctx, SelfSignedSecretName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Type != caSecretType {
			t.Errorf("Secret type %q, want %q", s.Type, caSecretType)
		}
		if !bytes.Equal(s.Data[CACertKey], roots[0]) {
			t.Error("ca-cert.pem of the Secret is not the root the replicas use")
		}
		// The API server lets exactly one Create win; every other replica
		// loads the winner's root.
		if n := strings.Count(logs.String(), "CA created a self-signed root"); n != 1 {
			t.Errorf("%d replicas created a root, want exactly 1:\n%s", n, logs.String())
		}
		if body := keyBody(s.Data[CAKeyKey]); body == "" || strings.Contains(logs.String(), body) || strings.Contains(logs.String(), "PRIVATE KEY") {
			t.Errorf("the log holds the private key, or the key is empty:\n%s", logs.String())
		}
		for _, k := range []string{CACertKey, CAKeyKey, CertChainKey, RootCertKey, privKeyKey} {
			if _, ok := s.Data[k]; !ok {
				t.Errorf("Secret lacks key %q that istiod writes", k)
			}
		}

		// A restart loads the same root and does not write.
		a, err := LoadOrCreate(ctx, env.Kube, Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.RootPEM(), roots[0]) || a.Source() != SourceSelfSigned {
			t.Errorf("restart: source %s, same root %v", a.Source(), bytes.Equal(a.RootPEM(), roots[0]))
		}
	})

	t.Run("cacerts wins over istio-ca-secret", func(t *testing.T) {
		ns := env.Namespace(t, "ca-plugged")
		self, err := LoadOrCreate(ctx, env.Kube, Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		p := newPluggedCA(t)
		createSecret(t, env, ns, PluggedSecretName, map[string][]byte{
			CACertKey: p.caCert, CAKeyKey: p.caKey, CertChainKey: p.certChain, RootCertKey: p.rootCert,
		})
		a, err := LoadOrCreate(ctx, env.Kube, Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		if a.Source() != SourcePlugged || !bytes.Equal(a.RootPEM(), p.rootCert) {
			t.Errorf("source %s; root is cacerts' root: %v", a.Source(), bytes.Equal(a.RootPEM(), p.rootCert))
		}
		if bytes.Equal(a.RootPEM(), self.RootPEM()) {
			t.Error("still the self-signed root")
		}
	})

	t.Run("an invalid cacerts is an error, not a fall-back", func(t *testing.T) {
		ns := env.Namespace(t, "ca-badplug")
		p := newPluggedCA(t)
		other := newPluggedCA(t)
		createSecret(t, env, ns, PluggedSecretName, map[string][]byte{
			CACertKey: p.caCert, CAKeyKey: other.caKey, CertChainKey: p.certChain, RootCertKey: p.rootCert,
		})
		if _, err := LoadOrCreate(ctx, env.Kube, Options{Namespace: ns}); err == nil {
			t.Fatal("loaded a cacerts whose key does not match its certificate")
		}
		if _, err := env.Kube.CoreV1().Secrets(ns).Get(ctx, SelfSignedSecretName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("istio-ca-secret was created anyway (get: %v)", err)
		}
	})

	t.Run("a corrupt istio-ca-secret is an error, never overwritten", func(t *testing.T) {
		ns := env.Namespace(t, "ca-corrupt")
		createSecret(t, env, ns, SelfSignedSecretName, map[string][]byte{CACertKey: []byte("junk"), CAKeyKey: []byte("junk")})
		if _, err := LoadOrCreate(ctx, env.Kube, Options{Namespace: ns}); err == nil {
			t.Fatal("loaded a corrupt istio-ca-secret")
		}
		s, err := env.Kube.CoreV1().Secrets(ns).Get(ctx, SelfSignedSecretName, metav1.GetOptions{})
		if err != nil || string(s.Data[CACertKey]) != "junk" {
			t.Errorf("the Secret changed: %v", err)
		}
	})

	t.Run("an istiod RSA root is loaded as is", func(t *testing.T) {
		ns := env.Namespace(t, "ca-istiod")
		key := rsaKey(t, 2048)
		_, certPEM := caCert(t, "istiod root", key, nil, nil)
		createSecret(t, env, ns, SelfSignedSecretName, map[string][]byte{CACertKey: certPEM, CAKeyKey: keyPEM(t, key)})
		a, err := LoadOrCreate(ctx, env.Kube, Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.RootPEM(), certPEM) {
			t.Error("root is not the Secret's")
		}
	})
}

func createSecret(t *testing.T, env *kubetest.Env, ns, name string, data map[string][]byte) {
	t.Helper()
	_, err := env.Kube.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}
