package ca

import (
	"context"
	"crypto/elliptic"
	"crypto/x509"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testlog"
)

// TestKeeperReloadsTheRoot runs a Keeper against a real API server and
// changes its Secrets as an operator would, in order: plug in a CA, break
// it, fix it with another CA, remove it. Each valid change is taken without
// a restart (new leaves are signed by it, subscribers are told, the expiry
// gauges follow); the broken one is refused, logged and counted, and the
// CA in use stays.
func TestKeeperReloadsTheRoot(t *testing.T) {
	t.Parallel()
	env := kubetest.StartWithoutCRDs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := env.Namespace(t, "ca-reload")
	secrets := env.Kube.CoreV1().Secrets(ns)

	var logs testlog.Buffer
	metrics := NewMetrics(nil)
	k := NewKeeper(env.Kube, Options{Namespace: ns, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, metrics)
	changes := k.Subscribe()
	if k.Current() != nil {
		t.Fatal("Current before Load")
	}
	if err := k.Load(ctx); err != nil {
		t.Fatal(err)
	}
	<-k.Ready()
	selfSigned := k.Current()
	if selfSigned.Source() != SourceSelfSigned {
		t.Fatalf("source %q, want %q", selfSigned.Source(), SourceSelfSigned)
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() { watched <- k.Watch(watchCtx) }()
	t.Cleanup(func() {
		stopWatch()
		if err := <-watched; err != nil {
			t.Errorf("Watch: %v", err)
		}
		if t.Failed() {
			t.Logf("keeper log:\n%s", logs.String())
		}
	})

	reloads := func(result string) float64 { return testutil.ToFloat64(metrics.RootReloads.WithLabelValues(result)) }
	// becomes waits until the Keeper signs with caCert, then checks what
	// every consumer relies on.
	becomes := func(t *testing.T, caCert *x509.Certificate, root *x509.Certificate) *Authority {
		t.Helper()
		eventually(t, "the Keeper to take the new CA", func() error {
			if cur := k.Current(); !cur.cert.Equal(caCert) {
				return fmt.Errorf("still signing with %s", cur.cert.Subject)
			}
			return nil
		})
		select {
		case <-changes:
		case <-time.After(10 * time.Second):
			t.Fatal("subscribers were not told of the new CA")
		}
		a := k.Current()
		leaf, err := a.Sign(csrFor(t, ecKey(t, elliptic.P256()), []string{testID.String()}), testID, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool(root), Intermediates: pool(a.chain...),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("a new leaf does not chain to the new root: %v", err)
		}
		if got := testutil.ToFloat64(metrics.RootExpiry); got != float64(root.NotAfter.Unix()) {
			t.Errorf("citadel_server_root_cert_expiry_timestamp %v, want %v", got, root.NotAfter.Unix())
		}
		if got := testutil.ToFloat64(metrics.CertChainExpiry); got != float64(caCert.NotAfter.Unix()) {
			t.Errorf("citadel_server_cert_chain_expiry_timestamp %v, want %v", got, caCert.NotAfter.Unix())
		}
		return a
	}

	first := newPluggedCA(t)
	t.Run("a plugged-in CA replaces the self-signed root", func(t *testing.T) {
		_, err := secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: PluggedSecretName},
			Data:       pluggedData(first),
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a := becomes(t, first.inter, first.root)
		if a.Source() != SourcePlugged {
			t.Errorf("source %q, want %q", a.Source(), SourcePlugged)
		}
		if got := reloads("ok"); got != 1 {
			t.Errorf("reloads{ok} = %v, want 1", got)
		}
	})

	t.Run("an invalid update keeps the CA in use, logged and counted", func(t *testing.T) {
		other := newPluggedCA(t)
		broken := pluggedData(first)
		broken[CAKeyKey] = other.caKey // not the key of ca-cert.pem
		updatePlugged(t, ctx, secrets, broken)
		eventually(t, "the refusal to be counted", func() error {
			if got := reloads("error"); got != 1 {
				return fmt.Errorf("reloads{error} = %v, want 1", got)
			}
			return nil
		})
		if cur := k.Current(); !cur.cert.Equal(first.inter) {
			t.Errorf("the Keeper now signs with %s; it must keep the working CA", cur.cert.Subject)
		}
		select {
		case <-changes:
			t.Error("subscribers were told of a change that was refused")
		default:
		}
		if !strings.Contains(logs.String(), "does not hold the private key") {
			t.Errorf("the log does not say why the Secret was refused:\n%s", logs.String())
		}
		if strings.Contains(logs.String(), "PRIVATE KEY") {
			t.Error("a private key reached the log")
		}
	})

	second := newPluggedCA(t)
	t.Run("a valid update is taken", func(t *testing.T) {
		updatePlugged(t, ctx, secrets, pluggedData(second))
		becomes(t, second.inter, second.root)
	})

	t.Run("removing the plugged-in CA returns to istio-ca-secret", func(t *testing.T) {
		if err := secrets.Delete(ctx, PluggedSecretName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		a := becomes(t, selfSigned.cert, selfSigned.roots[0])
		if a.Source() != SourceSelfSigned {
			t.Errorf("source %q, want %q", a.Source(), SourceSelfSigned)
		}
	})
	if strings.Contains(logs.String(), "PRIVATE KEY") {
		t.Error("a private key reached the log")
	}
}

// TestRootCertPublisherPublishesANewRoot: after SetRoot, the ConfigMap of
// every namespace holds the new root, on the real API server.
func TestRootCertPublisherPublishesANewRoot(t *testing.T) {
	t.Parallel()
	env := kubetest.StartWithoutCRDs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	namespaces := []string{env.Namespace(t, "root-a"), env.Namespace(t, "root-b")}
	old, next := mustSelfSigned(t, Options{}), mustSelfSigned(t, Options{})
	var logs testlog.Buffer
	p := NewRootCertPublisher(env.Kube, old.RootPEM(), slog.New(slog.NewTextHandler(&logs, nil)))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if t.Failed() {
			t.Logf("publisher log:\n%s", logs.String())
		}
	})
	holds := func(root []byte) func() error {
		return func() error {
			for _, ns := range namespaces {
				cm, err := env.Kube.CoreV1().ConfigMaps(ns).Get(ctx, RootCertConfigMap, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if cm.Data[RootCertKey] != string(root) {
					return fmt.Errorf("%s/%s does not hold the expected root", ns, RootCertConfigMap)
				}
			}
			return nil
		}
	}
	eventually(t, "the first root in every namespace", holds(old.RootPEM()))
	p.SetRoot(next.RootPEM())
	eventually(t, "the new root in every namespace", holds(next.RootPEM()))
}

func pluggedData(p pluggedCA) map[string][]byte {
	return map[string][]byte{CACertKey: p.caCert, CAKeyKey: p.caKey, CertChainKey: p.certChain, RootCertKey: p.rootCert}
}

func updatePlugged(t *testing.T, ctx context.Context, secrets interface {
	Get(context.Context, string, metav1.GetOptions) (*corev1.Secret, error)
	Update(context.Context, *corev1.Secret, metav1.UpdateOptions) (*corev1.Secret, error)
}, data map[string][]byte) {
	t.Helper()
	s, err := secrets.Get(ctx, PluggedSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data = data
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func pool(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}
