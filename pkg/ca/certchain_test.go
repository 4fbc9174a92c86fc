package ca

import (
	"crypto/elliptic"
	"crypto/x509"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/testlog"
)

// interRenewal is root → intermediate → signer, with the intermediate
// issued more than once under one key, as after its renewal: cert-chain.pem
// may then hold the old one beside the new.
type interRenewal struct {
	root, inter, signer *x509.Certificate
	signerKey           []byte
	issue               func(v validity) *x509.Certificate // the intermediate again
}

func newInterRenewal(t *testing.T) interRenewal {
	t.Helper()
	return newInterRenewalValid(t, aYear())
}

// newInterRenewalValid is newInterRenewal with root, intermediate and
// signer valid for v.
func newInterRenewalValid(t *testing.T, v validity) interRenewal {
	t.Helper()
	rootKey, interKey, signerKey := ecKey(t, elliptic.P256()), ecKey(t, elliptic.P256()), ecKey(t, elliptic.P256())
	root, _ := caCertValid(t, "plugged root", rootKey, nil, nil, v)
	inter, _ := caCertValid(t, "plugged intermediate", interKey, root, rootKey, v)
	signer, _ := caCertValid(t, "plugged signer", signerKey, inter, interKey, v)
	return interRenewal{
		root: root, inter: inter, signer: signer, signerKey: keyPEM(t, signerKey),
		issue: func(v validity) *x509.Certificate {
			c, _ := caCertValid(t, "plugged intermediate", interKey, root, rootKey, v)
			return c
		},
	}
}

// TestCertChainKeepsThePathToTheRoot: of cert-chain.pem, the CA hands
// out (and depends on) only the certificates on the path from its signing
// certificate to the root; any other one is logged and left out, so that
// it can neither expire the CA nor cut its leaves short.
func TestCertChainKeepsThePathToTheRoot(t *testing.T) {
	now := time.Now()
	r := newInterRenewal(t)
	expired := r.issue(validity{now.Add(-48 * time.Hour), now.Add(-24 * time.Hour)})
	expiring := r.issue(validity{now.Add(-time.Hour), now.Add(time.Hour)})
	other := newPluggedCA(t)

	tests := []struct {
		name    string
		file    []*x509.Certificate // cert-chain.pem
		ignored []*x509.Certificate
	}{
		{"the path alone", []*x509.Certificate{r.signer, r.inter, r.root}, nil},
		{"in reverse order", []*x509.Certificate{r.root, r.inter, r.signer}, nil},
		{"an expired intermediate beside its renewal", []*x509.Certificate{r.signer, expired, r.inter, r.root}, []*x509.Certificate{expired}},
		{"an expiring intermediate beside its renewal", []*x509.Certificate{r.signer, expiring, r.inter, r.root}, []*x509.Certificate{expiring}},
		{"another CA's certificate", []*x509.Certificate{r.signer, r.inter, other.inter, r.root}, []*x509.Certificate{other.inter}},
		{"a root root-cert.pem does not hold", []*x509.Certificate{r.signer, r.inter, other.root}, []*x509.Certificate{other.root}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var logs testlog.Buffer
			a, err := NewFromPEM(Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))},
				encodeCertificate(r.signer), r.signerKey, encodeCertificates(tc.file), encodeCertificate(r.root))
			if err != nil {
				t.Fatal(err)
			}
			cert, err := a.Sign(csrFor(t, ecKey(t, elliptic.P256()), nil), testID, 0)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{string(encodeCertificate(r.signer)), string(encodeCertificate(r.inter))}
			if !slices.Equal(cert.ChainPEM[1:], want) {
				t.Errorf("handed out %d certificates after the leaf, want the signer, then the intermediate", len(cert.ChainPEM)-1)
			}
			if atLeast := now.Add(DefaultCertTTL - time.Minute); cert.Leaf.NotAfter.Before(atLeast) {
				t.Errorf("leaf cut short: NotAfter %s, want about %s", cert.Leaf.NotAfter, now.Add(DefaultCertTTL))
			}
			pathExpiry := r.signer.NotAfter
			if r.inter.NotAfter.Before(pathExpiry) {
				pathExpiry = r.inter.NotAfter
			}
			if got := a.CertChainExpiry(); !got.Equal(pathExpiry) {
				t.Errorf("CertChainExpiry %s, want the path's %s", got, pathExpiry)
			}
			for _, c := range tc.ignored {
				if !strings.Contains(logs.String(), "serial="+c.SerialNumber.Text(16)+" notBefore="+c.NotBefore.Format(time.RFC3339)) {
					t.Errorf("the certificate left out (serial %x) is not logged with its NotBefore:\n%s", c.SerialNumber, logs.String())
				}
			}
			if got := strings.Count(logs.String(), "level=WARN"); got != len(tc.ignored) {
				t.Errorf("%d warnings, want %d:\n%s", got, len(tc.ignored), logs.String())
			}
		})
	}
}

// TestExpiredCertificateOnThePath: a certificate the signer cannot do
// without refuses the key material when it is loaded, naming it.
func TestExpiredCertificateOnThePath(t *testing.T) {
	now := time.Now()
	expired := validity{now.Add(-48 * time.Hour), now.Add(-24 * time.Hour)}
	r := newInterRenewal(t)
	expiredInter := r.issue(expired)
	for _, tc := range []struct {
		name  string
		chain []*x509.Certificate
		want  string
	}{
		{"intermediate expired, no renewal", []*x509.Certificate{r.signer, expiredInter, r.root}, `"CN=plugged intermediate" expired at`},
		{"intermediate missing", []*x509.Certificate{r.signer, r.root}, "does not chain up"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewFromPEM(Options{}, encodeCertificate(r.signer), r.signerKey, encodeCertificates(tc.chain), encodeCertificate(r.root))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %s", err, tc.want)
			}
		})
	}
}

// TestCACertFileWithMoreCertificates: a ca-cert.pem that holds more than
// the signing certificate (a tls.crt of cert-manager, the signer then its
// issuers) loses nothing unseen. Istio reads its first certificate alone;
// the CA also takes the others as candidates for the path to the root, as
// those of cert-chain.pem, and names any it leaves off the path.
func TestCACertFileWithMoreCertificates(t *testing.T) {
	r := newInterRenewal(t)
	other := newPluggedCA(t)
	tests := []struct {
		name          string
		caCert, chain []*x509.Certificate
		ignored       []*x509.Certificate // named in a warning, with ca-cert.pem
		err           string              // the load is refused, saying this
	}{
		{"the signer alone", []*x509.Certificate{r.signer}, []*x509.Certificate{r.signer, r.inter, r.root}, nil, ""},
		{"the signer and its issuers, in both files", []*x509.Certificate{r.signer, r.inter, r.root},
			[]*x509.Certificate{r.signer, r.inter, r.root}, nil, ""},
		{"the intermediate in ca-cert.pem alone", []*x509.Certificate{r.signer, r.inter}, nil, nil, ""},
		{"another CA's certificate after the signer", []*x509.Certificate{r.signer, other.inter},
			[]*x509.Certificate{r.signer, r.inter, r.root}, []*x509.Certificate{other.inter}, ""},
		{"the signer after its issuer", []*x509.Certificate{r.inter, r.signer}, []*x509.Certificate{r.signer, r.inter, r.root},
			nil, "the signing certificate must come first"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var logs testlog.Buffer
			a, err := NewFromPEM(Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))},
				encodeCertificates(tc.caCert), r.signerKey, encodeCertificates(tc.chain), encodeCertificate(r.root))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(a.chain, []*x509.Certificate{r.signer, r.inter}, (*x509.Certificate).Equal) {
				t.Errorf("handed out %d certificates after the leaf, want the signer, then the intermediate", len(a.chain))
			}
			var warnings []string
			for l := range strings.Lines(logs.String()) {
				if strings.Contains(l, "level=WARN") {
					warnings = append(warnings, l)
				}
			}
			if len(warnings) != len(tc.ignored) {
				t.Fatalf("%d warnings, want %d:\n%s", len(warnings), len(tc.ignored), logs.String())
			}
			for i, c := range tc.ignored {
				if w := warnings[i]; !strings.Contains(w, "serial="+c.SerialNumber.Text(16)) || !strings.Contains(w, CACertKey) {
					t.Errorf("warning %q does not name the certificate of %s left out (serial %x)", w, CACertKey, c.SerialNumber)
				}
			}
		})
	}
}
