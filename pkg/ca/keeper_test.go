package ca

import (
	"context"
	"crypto/elliptic"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

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
		k.reload(secrets, secrets, time.Time{})
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

// TestKeeperTakesHeldBackMaterialWhenValid: key material of the CA Secrets
// that is not valid yet (a renewed intermediate put beside the old one
// ahead of time, a new CA whose signing certificate starts later) is not
// used while it is not: peers would refuse every leaf signed with it. The
// CA keeps signing with what it has, and takes the new material as soon as
// has been valid for settleTime (peers whose clocks lag would refuse it
// before), without waiting for another change of the Secrets. Held-back
// material is no error: it is logged as held back, with the time of the
// switch, and counted apart. The Keeper's clock is a fake one, set back
// two hours: the new material becomes valid for it an hour later, and is
// valid already for Sign.
func TestKeeperTakesHeldBackMaterialWhenValid(t *testing.T) {
	const ns = "istio-system"
	now := time.Now()
	long := validity{now.Add(-3 * time.Hour), now.Add(365 * 24 * time.Hour)}
	validFrom := now.Add(-time.Hour) // of the new material
	later := validity{validFrom, long.notAfter}

	r := newInterRenewalValid(t, long)
	oldInter, renewedInter := r.issue(validity{long.notBefore, now.Add(30 * 24 * time.Hour)}), r.issue(later)
	renewal := func(chain ...*x509.Certificate) map[string][]byte {
		return map[string][]byte{CACertKey: encodeCertificate(r.signer), CAKeyKey: r.signerKey,
			CertChainKey: encodeCertificates(chain), RootCertKey: encodeCertificate(r.root)}
	}
	first, second := newCAChain(t, long, long), newCAChain(t, long, later)

	for _, tc := range []struct {
		name           string
		loaded, update map[string][]byte // cacerts, at Load and then
		heard          string            // what the log says once the Keeper has read the update
		// What the CA signs with before and after the new material
		// becomes valid: the signing certificate, then the chain it
		// hands out.
		before, after []*x509.Certificate
	}{
		{"an intermediate renewed ahead of time", renewal(r.signer, oldInter, r.root), renewal(r.signer, oldInter, renewedInter, r.root),
			"serial=" + renewedInter.SerialNumber.Text(16),
			[]*x509.Certificate{r.signer, r.signer, oldInter}, []*x509.Certificate{r.signer, r.signer, renewedInter}},
		{"a new CA whose signing certificate starts later", pluggedData(first), pluggedData(second),
			`msg="the CA holds back new key material of its Secret until it has been valid for a while" source=cacerts signer="CN=plugged intermediate 1" switchAt=` +
				second.inter.NotBefore.Add(settleTime).Format("2006-01-02T15:04:05.000Z07:00"),
			[]*x509.Certificate{first.inter, first.inter}, []*x509.Certificate{second.inter, second.inter}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			kube := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: PluggedSecretName}, Data: tc.loaded})
			var logs testlog.Buffer
			k := NewKeeper(kube, Options{Namespace: ns, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, nil)
			clock := clocktesting.NewFakeClock(now.Add(-2 * time.Hour))
			k.clock = clock
			changes := k.Subscribe()
			if err := k.Load(ctx); err != nil {
				t.Fatal(err)
			}
			watchCtx, stopWatch := context.WithCancel(ctx)
			watched := make(chan error, 1)
			go func() { watched <- k.Watch(watchCtx) }()
			defer func() {
				stopWatch()
				if err := <-watched; err != nil {
					t.Errorf("Watch: %v", err)
				}
				if t.Failed() {
					t.Logf("keeper log:\n%s", logs.String())
				}
			}()
			signsWith := func(want []*x509.Certificate) error {
				cur := k.Current()
				if got := append([]*x509.Certificate{cur.cert}, cur.chain...); !slices.EqualFunc(got, want, (*x509.Certificate).Equal) {
					return fmt.Errorf("signs with %v, want %v", serials(got), serials(want))
				}
				return nil
			}

			updatePlugged(t, ctx, kube.CoreV1().Secrets(ns), tc.update)
			eventually(t, "the Keeper to read the update", func() error {
				if !strings.Contains(logs.String(), tc.heard) {
					return errors.New("the log does not say " + tc.heard)
				}
				return nil
			})
			if err := signsWith(tc.before); err != nil {
				t.Fatalf("before the new material is valid, the CA %v", err)
			}
			select {
			case <-changes:
				t.Fatal("subscribers were told of a change before the new material was valid")
			default:
			}

			eventually(t, "the CA to take the new material once valid", func() error {
				clock.SetTime(validFrom.Add(settleTime)) // again at each try: it wakes a timer set since the last
				return signsWith(tc.after)
			})
			select {
			case <-changes:
			case <-time.After(10 * time.Second):
				t.Fatal("subscribers were not told of the switch")
			}
			if n := strings.Count(logs.String(), `msg="the CA switched to`); n != 1 {
				t.Errorf("the switch logged %d times, want once", n)
			}
			if n := testutil.ToFloat64(k.metrics.RootReloads.WithLabelValues("error")); n != 0 {
				t.Errorf("%v reloads counted as errors, want none: the material was only early", n)
			}
			held := strings.Count(logs.String(), `msg="the CA holds back`)
			if n := testutil.ToFloat64(k.metrics.RootReloads.WithLabelValues("held_back")); held > 1 || float64(held) != n {
				t.Errorf("held back material logged %d times and counted %v times, want at most once, and as often as logged", held, n)
			}
			if _, err := k.Current().Sign(csrFor(t, ecKey(t, elliptic.P256()), nil), testID, time.Hour); err != nil {
				t.Errorf("Sign with the new material: %v", err)
			}
		})
	}
}
