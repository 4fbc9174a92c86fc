package ca

import (
	"context"
	"crypto/x509"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/meshpilot/meshpilot/internal/testlog"
)

// TestKeeperWarnsOncePerLoadedFiles: a certificate of cert-chain.pem off
// the path to the root is named once for the files that hold it, not again
// at each event that makes the Keeper read its Secrets (the informers'
// first list, an edit of the other Secret, of a label). Files that change
// are a new load: the path to the root is chosen anew and what is off it
// named again.
func TestKeeperWarnsOncePerLoadedFiles(t *testing.T) {
	const ns = "istio-system"
	r := newInterRenewal(t)
	stray := newPluggedCA(t).inter // another CA's certificate
	// The intermediate in use at first expires in a month; r.inter is its
	// renewal, which lasts a year.
	old := r.issue(validity{time.Now().Add(-time.Hour), time.Now().Add(30 * 24 * time.Hour)})
	plugged := func(chain ...*x509.Certificate) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: PluggedSecretName},
			Data: map[string][]byte{CACertKey: encodeCertificate(r.signer), CAKeyKey: r.signerKey,
				CertChainKey: encodeCertificates(chain), RootCertKey: encodeCertificate(r.root)},
		}
	}
	cacerts := plugged(r.signer, old, stray, r.root)
	selfSigned := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: SelfSignedSecretName}}

	var logs testlog.Buffer
	k := NewKeeper(fake.NewClientset(cacerts), Options{Namespace: ns, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, nil)
	if err := k.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	// What the informers would hold; reload is what Watch runs on each event.
	store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	secrets := corelisters.NewSecretLister(store).Secrets(ns)
	for _, s := range []*corev1.Secret{cacerts, selfSigned} {
		if err := store.Add(s.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	warned := func(c *x509.Certificate) int {
		return strings.Count(logs.String(), "serial="+c.SerialNumber.Text(16))
	}
	if warned(stray) != 1 {
		t.Fatalf("the certificate off the path is not named once at Load:\n%s", logs.String())
	}

	for _, step := range []struct {
		name   string
		change *corev1.Secret // put in the store before the reload; nil: none
		path   []*x509.Certificate
		warns  map[*x509.Certificate]int // how often each has been named, in all
	}{
		{"the informers' first list", nil, []*x509.Certificate{r.signer, old}, map[*x509.Certificate]int{stray: 1}},
		{"istio-ca-secret edited", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: SelfSignedSecretName,
			Labels: map[string]string{"edited": "yes"}}}, []*x509.Certificate{r.signer, old}, map[*x509.Certificate]int{stray: 1}},
		{"a label added to cacerts", func() *corev1.Secret {
			s := cacerts.DeepCopy()
			s.Labels = map[string]string{"owner": "security"}
			return s
		}(), []*x509.Certificate{r.signer, old}, map[*x509.Certificate]int{stray: 1}},
		// The renewal outlives the old intermediate: the path takes it,
		// and the old one is now off it.
		{"the intermediate renewed, the old one left in the file", plugged(r.signer, old, r.inter, stray, r.root),
			[]*x509.Certificate{r.signer, r.inter}, map[*x509.Certificate]int{stray: 2, old: 1}},
		{"read again unchanged", nil, []*x509.Certificate{r.signer, r.inter}, map[*x509.Certificate]int{stray: 2, old: 1}},
	} {
		if step.change != nil {
			if err := store.Update(step.change); err != nil {
				t.Fatal(err)
			}
		}
		k.reload(secrets, secrets)
		if chain := k.Current().chain; !slices.EqualFunc(chain, step.path, (*x509.Certificate).Equal) {
			t.Errorf("%s: the chain handed out is %v, want the path to the root %v", step.name, serials(chain), serials(step.path))
		}
		for c, want := range step.warns {
			if got := warned(c); got != want {
				t.Errorf("%s: %q (serial %x) named %d times, want %d", step.name, c.Subject, c.SerialNumber, got, want)
			}
		}
	}
	if t.Failed() {
		t.Logf("keeper log:\n%s", logs.String())
	}
}

func serials(certs []*x509.Certificate) []string {
	var out []string
	for _, c := range certs {
		out = append(out, c.SerialNumber.Text(16))
	}
	return out
}
