package ca

import (
	"context"
	"crypto/elliptic"
	"crypto/x509"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A CA loaded while valid, whose signer, intermediate or root has expired
// since (or that is not valid yet), issues nothing: neither a workload
// certificate nor a serving certificate. Before, it issued certificates
// that were already expired. The certificates carry explicit validities
// in the past or the future, so no test waits for one to expire.
func TestCAOutsideItsValidityRefusesToSign(t *testing.T) {
	now := time.Now()
	expired := validity{now.Add(-48 * time.Hour), now.Add(-24 * time.Hour)}
	future := validity{now.Add(24 * time.Hour), now.Add(48 * time.Hour)}
	// Valid at every moment a CA below is loaded, and now.
	long := validity{now.Add(-72 * time.Hour), now.Add(365 * 24 * time.Hour)}
	yesterday, tomorrow := now.Add(-36*time.Hour), now.Add(36*time.Hour)
	for _, tc := range []struct {
		name   string
		chain  []validity // root first, signer last
		loaded time.Time
		want   string // the certificate named, and what is wrong with it
	}{
		{"self-signed root expired", []validity{expired}, yesterday, `"CN=plugged root" expired at`},
		{"signer expired", []validity{long, expired}, yesterday, `"CN=plugged intermediate 1" expired at`},
		{"intermediate expired", []validity{long, expired, long}, yesterday, `"CN=plugged intermediate 1" expired at`},
		{"root expired", []validity{expired, long}, yesterday, `"CN=plugged root" expired at`},
		{"signer not valid yet", []validity{long, future}, tomorrow, `"CN=plugged intermediate 1" is not valid before`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := loadedAt(t, tc.loaded, newCAChain(t, tc.chain...))
			cert, err := a.Sign(csrFor(t, ecKey(t, elliptic.P256()), nil), testID, 0)
			if err == nil {
				t.Fatalf("issued a certificate valid %s to %s", cert.Leaf.NotBefore, cert.Leaf.NotAfter)
			}
			if !errors.Is(err, ErrCertGen) || !errors.Is(err, ErrCANotValid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Sign: %v, want a CERT_GEN_ERROR (ErrCANotValid) saying %s", err, tc.want)
			}
			serving, err := a.ServingCertificate([]string{"istiod.istio-system.svc"}, 0)
			if err == nil {
				t.Fatalf("issued a serving certificate valid %s to %s", serving.Leaf.NotBefore, serving.Leaf.NotAfter)
			}
			if !errors.Is(err, ErrCANotValid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ServingCertificate: %v, want ErrCANotValid saying %s", err, tc.want)
			}
		})
	}
}

// A leaf never outlives any certificate of the chain a peer verifies it
// with: not the signer, an intermediate, or the root. Before, only the
// signer's own expiry capped it.
func TestLeafNeverOutlivesItsChain(t *testing.T) {
	now := time.Now()
	soon := validity{now.Add(-time.Hour), now.Add(2 * time.Hour)}
	// X.509 times have whole seconds; the encoding drops the rest.
	want := soon.notAfter.Truncate(time.Second)
	for _, tc := range []struct {
		name  string
		chain []validity // root first, signer last
	}{
		{"self-signed root", []validity{soon}},
		{"signer", []validity{aYear(), soon}},
		{"intermediate", []validity{aYear(), soon, aYear()}},
		{"root", []validity{soon, aYear()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := loadedAt(t, now, newCAChain(t, tc.chain...))
			cert, err := a.Sign(csrFor(t, ecKey(t, elliptic.P256()), nil), testID, 5*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if !cert.Leaf.NotAfter.Equal(want) {
				t.Errorf("leaf NotAfter %s, want the chain's first expiry %s", cert.Leaf.NotAfter, want)
			}
			serving, err := a.ServingCertificate([]string{"istiod.istio-system.svc"}, 5*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if !serving.Leaf.NotAfter.Equal(want) {
				t.Errorf("serving NotAfter %s, want the chain's first expiry %s", serving.Leaf.NotAfter, want)
			}
		})
	}
}

// A leaf is not valid before its signer either: backdating for clock skew
// stops at the signer's NotBefore.
func TestLeafNotValidBeforeItsSigner(t *testing.T) {
	now := time.Now()
	signer := validity{now.Add(-10 * time.Second), now.Add(time.Hour)}
	a := loadedAt(t, now, newCAChain(t, aYear(), signer))
	cert, err := a.Sign(csrFor(t, ecKey(t, elliptic.P256()), nil), testID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := signer.notBefore.Truncate(time.Second); !cert.Leaf.NotBefore.Equal(want) {
		t.Errorf("leaf NotBefore %s, want the signer's %s", cert.Leaf.NotBefore, want)
	}
}

// A caller of an expired CA is told so (FailedPrecondition, naming the
// expired certificate), and the refusal is counted as a CERT_GEN_ERROR,
// never as an issuance.
func TestCreateCertificateFromAnExpiredCA(t *testing.T) {
	now := time.Now()
	expired := validity{now.Add(-48 * time.Hour), now.Add(-24 * time.Hour)}
	a := loadedAt(t, now.Add(-36*time.Hour), newCAChain(t, expired))
	metrics := NewMetrics(nil)
	s, err := NewServer(ServerOptions{Authority: a, Authenticators: []Authenticator{proven{Identity: testID}}, Metrics: metrics, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.CreateCertificate(context.Background(), &pb.IstioCertificateRequest{Csr: string(csrFor(t, ecKey(t, elliptic.P256()), nil))})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "expired at") {
		t.Errorf("got %v, want FailedPrecondition saying the CA expired", err)
	}
	if got := testutil.ToFloat64(metrics.SignErrors.WithLabelValues(ErrCertGen.Label)); got != 1 {
		t.Errorf("citadel_server_csr_sign_err_count{error=CERT_GEN_ERROR} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(metrics.Success); got != 0 {
		t.Errorf("citadel_server_success_cert_issuance_count = %v, want 0", got)
	}
}

// proven is an Authenticator that accepts every caller as this one. It
// can also hold a proven caller whose Pod the API server no longer has:
// with a real token, the TokenReview itself would refuse it once the Pod
// is gone, and the window between the two checks cannot be forced.
type proven Caller

func (proven) Name() string { return "test" }

func (p proven) Authenticate(context.Context) (*Caller, error) {
	c := Caller(p)
	c.Method = "test"
	return &c, nil
}

// TestSettledAuthority: a running CA signs with a certificate of its
// Secret only once it has been valid for settleTime, so that peers whose
// clocks lag behind accept the chain too. Until then the certificate is
// held back as if it were not valid yet, and settleAt says when that ends;
// what is kept must not have expired by now. A starting CA with nothing
// settled to sign with takes what is valid now.
func TestSettledAuthority(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	long := validity{now.Add(-3 * time.Hour), now.Add(365 * 24 * time.Hour)}
	began := now.Add(-settleTime / 2) // of the newest certificate: not settled yet
	recent := validity{began, long.notAfter}

	r := newInterRenewalValid(t, long)
	oldInter, renewedInter := r.issue(validity{long.notBefore, now.Add(30 * 24 * time.Hour)}), r.issue(recent)
	renewal := map[string][]byte{CACertKey: encodeCertificate(r.signer), CAKeyKey: r.signerKey,
		CertChainKey: encodeCertificates([]*x509.Certificate{r.signer, oldInter, renewedInter, r.root}), RootCertKey: encodeCertificate(r.root)}
	settled, expiredInter := newCAChain(t, long, long), newCAChain(t, long, validity{long.notBefore, now.Add(-settleTime / 2)})
	secret := func(data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: PluggedSecretName}, Data: data}
	}

	for _, tc := range []struct {
		name string
		data map[string][]byte
		// The signing certificate and chain the CA settles on, or the
		// error that refuses the material; and when more of it settles.
		want     []*x509.Certificate
		wantErr  string
		settleAt time.Time
	}{
		{name: "valid for long", data: pluggedData(settled), want: []*x509.Certificate{settled.inter, settled.inter}},
		{name: "an intermediate renewed a moment ago, beside the old one", data: renewal,
			want: []*x509.Certificate{r.signer, r.signer, oldInter}, settleAt: began.Add(settleTime)},
		{name: "a signing certificate that began a moment ago", data: pluggedData(newCAChain(t, long, recent)),
			wantErr: "is not valid before", settleAt: began.Add(settleTime)},
		{name: "an intermediate that expired a moment ago", data: pluggedData(expiredInter),
			wantErr: `"CN=plugged intermediate 1" expired at`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := secret(tc.data)
			a, settleAt, err := settledAuthority(Options{}.withDefaults(), s, now)
			if !settleAt.Equal(tc.settleAt) {
				t.Errorf("settles at %v, want %v", settleAt, tc.settleAt)
			}
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			default:
				if got := append([]*x509.Certificate{a.cert}, a.chain...); !slices.EqualFunc(got, tc.want, (*x509.Certificate).Equal) {
					t.Errorf("signs with %v, want %v", serials(got), serials(tc.want))
				}
			}
		})
	}

	t.Run("a starting CA takes what began a moment ago", func(t *testing.T) {
		ca := newCAChain(t, long, recent)
		a, err := startingAuthority(Options{}.withDefaults(), secret(pluggedData(ca)), now)
		if err != nil {
			t.Fatal(err)
		}
		if !a.cert.Equal(ca.inter) {
			t.Errorf("signs with %s, want the new signing certificate", a.cert.Subject)
		}
	})
}
