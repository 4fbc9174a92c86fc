package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const day = 24 * time.Hour

func servingLeaf(t *testing.T, m *CertManager) *x509.Certificate {
	t.Helper()
	cert, err := m.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	return cert.Leaf
}

func TestCertManagerIssuesServiceSANs(t *testing.T) {
	clock := newFakeClock()
	m, err := NewCertManager(CertOptions{
		Namespace: "istio-system", Revision: "1-8-1", ServiceName: ServiceNameFor("1-8-1"),
		ExtraIPs: []net.IP{net.ParseIP("127.0.0.1")}, Now: clock.Now, Logger: discardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.GetCertificate(nil); err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("before Init: err = %v, want not ready", err)
	}
	select {
	case <-m.Ready():
		t.Fatal("ready before Init")
	default:
	}
	if err := m.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-m.Ready()
	leaf := servingLeaf(t, m)
	wantDNS := []string{
		"istiod-1-8-1", "istiod-1-8-1.istio-system", "istiod-1-8-1.istio-system.svc",
		"istiod-1-8-1.istio-system.svc.cluster.local",
	}
	if !slices.Equal(leaf.DNSNames, wantDNS) {
		t.Errorf("DNS SANs = %q, want %q", leaf.DNSNames, wantDNS)
	}
	if len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) {
		t.Errorf("IP SANs = %v, want [127.0.0.1]", leaf.IPAddresses)
	}
	if leaf.IsCA {
		t.Error("serving certificate is a CA")
	}
	if _, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Errorf("key type %T, want ECDSA", leaf.PublicKey)
	}
	if got, want := leaf.NotAfter, clock.Now().Add(defaultCertValidity); !got.Equal(want) {
		t.Errorf("NotAfter = %v, want %v", got, want)
	}
	bundle := m.CABundle()
	cas := parsePEMCerts(t, bundle)
	if len(cas) != 1 || !cas[0].IsCA {
		t.Fatalf("bundle holds %d certificates, want one CA", len(cas))
	}
	for _, name := range append(wantDNS, "127.0.0.1") {
		if err := verifyServing(leaf, bundle, name, clock.Now()); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	if err := verifyServing(leaf, bundle, "istiod.istio-system.svc", clock.Now()); err == nil {
		t.Error("certificate verifies for another service's name")
	}
	if got := testutil.ToFloat64(m.metrics.CertRotations.WithLabelValues("initial")); got != 1 {
		t.Errorf("initial issues = %v, want 1", got)
	}
}

func TestCertManagerRotatesBeforeExpiry(t *testing.T) {
	clock := newFakeClock()
	m, err := NewCertManager(CertOptions{
		ExtraDNSNames: []string{"webhook.test"}, Now: clock.Now, Logger: discardLogger(),
		CAValidity: 90 * day, CARotateBefore: 30 * day, CertValidity: 30 * day, RotateBefore: 10 * day,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Init(ctx); err != nil {
		t.Fatal(err)
	}
	first := servingLeaf(t, m)
	firstBundle := m.CABundle()

	clock.Advance(19 * day) // 11 days left: keep it
	if err := m.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := servingLeaf(t, m); got.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatal("rotated while more than RotateBefore remained")
	}

	clock.Advance(2 * day) // 9 days left: rotate
	if err := m.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	second := servingLeaf(t, m)
	if second.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Fatal("not rotated within RotateBefore of expiry")
	}
	if !second.NotAfter.Equal(clock.Now().Add(30 * day)) {
		t.Errorf("rotated NotAfter = %v, want %v", second.NotAfter, clock.Now().Add(30*day))
	}
	if !bytes.Equal(m.CABundle(), firstBundle) {
		t.Error("the CA changed with a serving rotation")
	}
	if got := testutil.ToFloat64(m.metrics.CertRotations.WithLabelValues("expiring")); got != 1 {
		t.Errorf("expiring issues = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.metrics.CertExpiry); got != float64(second.NotAfter.Unix()) {
		t.Errorf("expiry gauge = %v, want %v", got, second.NotAfter.Unix())
	}

	// Day 61: the CA has 29 days left, under CARotateBefore. A new CA signs
	// a new certificate, and the old CA stays trusted so that certificates
	// it signed (other replicas') keep working.
	clock.Advance(40 * day)
	if err := m.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	third := servingLeaf(t, m)
	bundle := m.CABundle()
	cas := parsePEMCerts(t, bundle)
	if len(cas) != 2 {
		t.Fatalf("bundle during CA rotation holds %d CAs, want 2 (new, previous)", len(cas))
	}
	if !bytes.Equal(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cas[1].Raw}), firstBundle) {
		t.Error("the previous CA is not the second entry of the bundle")
	}
	if err := verifyServing(third, bundle, "webhook.test", clock.Now()); err != nil {
		t.Errorf("new certificate: %v", err)
	}
	if err := verifyServing(third, firstBundle, "webhook.test", clock.Now()); err == nil {
		t.Error("new certificate verifies against the old CA alone: the CA did not change")
	}
	if err := verifyServing(second, bundle, "webhook.test", second.NotAfter.Add(-time.Hour)); err != nil {
		t.Errorf("certificate of the previous CA no longer trusted: %v", err)
	}
	if got := testutil.ToFloat64(m.metrics.CertRotations.WithLabelValues("ca_changed")); got != 1 {
		t.Errorf("ca_changed issues = %v, want 1", got)
	}

	// Once the previous CA expires it leaves the bundle.
	clock.Advance(30 * day)
	if err := m.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if cas := parsePEMCerts(t, m.CABundle()); len(cas) != 1 {
		t.Errorf("bundle after the old CA expired holds %d CAs, want 1", len(cas))
	}
}

func TestCertManagerOptionErrors(t *testing.T) {
	cases := []struct {
		name string
		opts CertOptions
		want string
	}{
		{name: "no names", opts: CertOptions{}, want: "no names"},
		{name: "service without namespace", opts: CertOptions{ServiceName: "istiod"}, want: "needs a Namespace"},
		{name: "client without namespace", opts: CertOptions{Client: fake.NewClientset()}, want: "Namespace is required"},
		{name: "rotate after expiry", opts: CertOptions{ExtraDNSNames: []string{"a"}, CertValidity: day, RotateBefore: 2 * day}, want: "RotateBefore"},
		{name: "CA rotate after expiry", opts: CertOptions{ExtraDNSNames: []string{"a"}, CAValidity: day, CARotateBefore: day}, want: "CARotateBefore"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewCertManager(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestCertManagerDefaultsNames(t *testing.T) {
	for _, tc := range []struct{ rev, service, validator, label string }{
		{rev: "", service: "istiod", validator: "istio-validator-istio-system", label: "default"},
		{rev: "1-8-1", service: "istiod-1-8-1", validator: "istio-validator-1-8-1-istio-system", label: "1-8-1"},
	} {
		m, err := NewCertManager(CertOptions{Client: fake.NewClientset(), Namespace: "istio-system", Revision: tc.rev})
		if err != nil {
			t.Fatal(err)
		}
		if m.opts.ServiceName != tc.service || m.opts.ValidatorName != tc.validator || m.opts.SecretName != "meshpilot-webhook-ca" {
			t.Errorf("revision %q: service %q validator %q secret %q", tc.rev, m.opts.ServiceName, m.opts.ValidatorName, m.opts.SecretName)
		}
		if got := RevisionLabelValue(tc.rev); got != tc.label {
			t.Errorf("revision %q: label %q, want %q", tc.rev, got, tc.label)
		}
	}
}

func newKubeManager(t *testing.T, client *fake.Clientset, clock *fakeClock) *CertManager {
	t.Helper()
	m, err := NewCertManager(CertOptions{
		Client: client, Namespace: "istio-system", Now: clock.Now, Logger: discardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCASharedViaSecret(t *testing.T) {
	client := fake.NewClientset()
	clock := newFakeClock()
	ctx := context.Background()
	a, b := newKubeManager(t, client, clock), newKubeManager(t, client, clock)
	if err := a.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.CABundle(), b.CABundle()) {
		t.Fatal("two replicas disagree on the CA")
	}
	secret, err := client.CoreV1().Secrets("istio-system").Get(ctx, DefaultCASecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(secret.Data[SecretKeyCACert], a.CABundle()) || len(secret.Data[SecretKeyCAKey]) == 0 {
		t.Error("the Secret does not hold the CA certificate and key")
	}
	if secret.Labels["istio.io/rev"] != "default" {
		t.Errorf("Secret labels = %v", secret.Labels)
	}
	// Each replica has its own key pair, trusted through the shared CA.
	la, lb := servingLeaf(t, a), servingLeaf(t, b)
	if la.SerialNumber.Cmp(lb.SerialNumber) == 0 {
		t.Error("replicas share a serving certificate")
	}
	for _, leaf := range []*x509.Certificate{la, lb} {
		if err := verifyServing(leaf, a.CABundle(), "istiod.istio-system.svc", clock.Now()); err != nil {
			t.Error(err)
		}
	}
	creates := 0
	for _, action := range client.Actions() {
		if action.Matches("create", "secrets") {
			creates++
		}
	}
	if creates != 1 {
		t.Errorf("%d Secret creates, want 1", creates)
	}
}

var secretsResource = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// otherReplicaSecret is a CA Secret as another replica would write it.
func otherReplicaSecret(t *testing.T, clock *fakeClock) (*corev1.Secret, []byte) {
	t.Helper()
	ca, err := newAuthority("other replica", clock.Now(), defaultCAValidity)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: DefaultCASecretName, Namespace: "istio-system", ResourceVersion: "7"},
		Data:       map[string][]byte{SecretKeyCACert: ca.certPEM, SecretKeyCAKey: ca.keyPEM},
	}, ca.certPEM
}

func TestCASecretCreateRaceAdoptsTheWinner(t *testing.T) {
	client := fake.NewClientset()
	clock := newFakeClock()
	winner, winnerCA := otherReplicaSecret(t, clock)
	raced := false
	client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if raced {
			return false, nil, nil
		}
		raced = true
		// Another replica creates the Secret between our Get and Create.
		if err := client.Tracker().Create(secretsResource, winner, "istio-system"); err != nil {
			t.Fatal(err)
		}
		return true, nil, apierrors.NewAlreadyExists(secretsResource.GroupResource(), DefaultCASecretName)
	})
	m := newKubeManager(t, client, clock)
	if err := m.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !raced {
		t.Fatal("the manager never tried to create the Secret")
	}
	if !bytes.Equal(m.CABundle(), winnerCA) {
		t.Fatal("the manager kept its own CA instead of the one that won the race")
	}
	if err := verifyServing(servingLeaf(t, m), winnerCA, "istiod.istio-system.svc", clock.Now()); err != nil {
		t.Fatal(err)
	}
}

func TestCASecretRotationConflictAdoptsTheWinner(t *testing.T) {
	clock := newFakeClock()
	old, err := newAuthority("old", clock.Now().Add(-300*day), defaultCAValidity)
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: DefaultCASecretName, Namespace: "istio-system", ResourceVersion: "3"},
		Data:       map[string][]byte{SecretKeyCACert: old.certPEM, SecretKeyCAKey: old.keyPEM},
	})
	winner, winnerCA := otherReplicaSecret(t, clock)
	winner.Data[SecretKeyPreviousCACert] = old.certPEM
	raced := false
	client.PrependReactor("update", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if raced {
			return false, nil, nil
		}
		raced = true
		if err := client.Tracker().Update(secretsResource, winner, "istio-system"); err != nil {
			t.Fatal(err)
		}
		return true, nil, apierrors.NewConflict(secretsResource.GroupResource(), DefaultCASecretName, nil)
	})
	m := newKubeManager(t, client, clock)
	if err := m.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !raced {
		t.Fatal("an expiring CA was not rotated")
	}
	cas := parsePEMCerts(t, m.CABundle())
	if len(cas) != 2 || !bytes.Equal(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cas[0].Raw}), winnerCA) {
		t.Fatalf("bundle = %d certificates, want the winner's CA then the old one", len(cas))
	}
}

func TestCASecretRotatesExpiringAndReplacesCorrupt(t *testing.T) {
	clock := newFakeClock()
	old, err := newAuthority("old", clock.Now().Add(-300*day), defaultCAValidity)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name         string
		data         map[string][]byte
		wantPrevious []byte
	}{
		{name: "expiring", data: map[string][]byte{SecretKeyCACert: old.certPEM, SecretKeyCAKey: old.keyPEM}, wantPrevious: old.certPEM},
		{name: "corrupt", data: map[string][]byte{SecretKeyCACert: []byte("junk")}},
		{name: "key mismatch", data: map[string][]byte{SecretKeyCACert: old.certPEM, SecretKeyCAKey: mustAuthority(t, clock).keyPEM}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(&corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: DefaultCASecretName, Namespace: "istio-system"},
				Data:       tc.data,
			})
			m := newKubeManager(t, client, clock)
			if err := m.Init(context.Background()); err != nil {
				t.Fatal(err)
			}
			secret, err := client.CoreV1().Secrets("istio-system").Get(context.Background(), DefaultCASecretName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ca, err := parseAuthority(secret.Data[SecretKeyCACert], secret.Data[SecretKeyCAKey])
			if err != nil {
				t.Fatalf("the Secret was not repaired: %v", err)
			}
			if !ca.cert.NotAfter.Equal(clock.Now().Add(defaultCAValidity)) {
				t.Errorf("new CA NotAfter = %v", ca.cert.NotAfter)
			}
			if !bytes.Equal(secret.Data[SecretKeyPreviousCACert], tc.wantPrevious) {
				t.Errorf("previous CA = %q, want %q", secret.Data[SecretKeyPreviousCACert], tc.wantPrevious)
			}
			if err := verifyServing(servingLeaf(t, m), m.CABundle(), "istiod.istio-system.svc", clock.Now()); err != nil {
				t.Error(err)
			}
		})
	}
}

func mustAuthority(t *testing.T, clock *fakeClock) *authority {
	t.Helper()
	ca, err := newAuthority("x", clock.Now(), day)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestStaticCertManager(t *testing.T) {
	clock := newFakeClock()
	ca := mustAuthority(t, clock)
	cert, err := ca.issue([]string{"local.test"}, nil, clock.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	m, err := NewStaticCertManager(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	<-m.Ready()
	got, err := m.GetCertificate(nil)
	if err != nil || !bytes.Equal(got.Certificate[0], cert.Certificate[0]) {
		t.Fatalf("GetCertificate = %v, %v; want the given certificate", got, err)
	}
	if m.CABundle() != nil {
		t.Error("a static manager has no CA bundle")
	}
	if err := m.Init(context.Background()); err != nil {
		t.Error(err)
	}
	if _, err := NewStaticCertManager(certPEM, []byte("nope")); err == nil {
		t.Error("a bad key was accepted")
	}
}
