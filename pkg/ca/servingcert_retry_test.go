package ca

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// While the CA is expired the listener gets no certificate, rather than
// an expired one re-issued every second: each attempt waits longer than
// the last, every failure is counted, and the failing state is logged
// once when it starts and once when new key material ends it.
func TestRotatingServingCertWhileTheCAIsExpired(t *testing.T) {
	now := time.Now()
	expired := loadedAt(t, now.Add(-36*time.Hour),
		newCAChain(t, validity{now.Add(-48 * time.Hour), now.Add(-24 * time.Hour)}))
	valid := mustSelfSigned(t, Options{})
	var current providerFunc = func() *Authority { return expired }
	var logs bytes.Buffer
	metrics := NewMetrics(nil)
	r, err := NewRotatingServingCert(ServingCertOptions{
		Authority: &current, Names: []string{"istiod.istio-system.svc"}, Listener: "webhook", Metrics: metrics,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Issue(); !errors.Is(err, ErrCANotValid) {
		t.Fatalf("Issue with an expired CA: %v, want ErrCANotValid", err)
	}
	if c, err := r.GetCertificate(nil); err == nil {
		t.Fatalf("the listener serves a certificate valid until %s", c.Leaf.NotAfter)
	}

	errorLogs := func() int { return strings.Count(logs.String(), "level=ERROR") }
	for n := 1; n <= 3; n++ {
		start := time.Now()
		wait := r.renew().Sub(start)
		if want := servingRetry(n); wait < want || wait > want+time.Second {
			t.Errorf("attempt %d: next in %s, want %s", n, wait, want)
		}
	}
	if got := testutil.ToFloat64(metrics.ServingCertFailures.WithLabelValues("webhook")); got != 3 {
		t.Errorf("meshpilot_serving_cert_issue_failures_total = %v, want 3", got)
	}
	if got := errorLogs(); got != 1 {
		t.Errorf("%d error lines for one failing state, want 1:\n%s", got, logs.String())
	}

	current = func() *Authority { return valid }
	if next := r.renew(); time.Until(next) < time.Hour {
		t.Errorf("after recovery, next renewal in %s, want the certificate's renewal time", time.Until(next))
	}
	if c, err := r.GetCertificate(nil); err != nil || time.Now().After(c.Leaf.NotAfter) {
		t.Errorf("after recovery the listener serves %v, %v", c, err)
	}
	if !strings.Contains(logs.String(), "issued again") {
		t.Error("the recovery is not logged")
	}

	// A new failing state is logged again, and backs off from the start.
	current = func() *Authority { return expired }
	start := time.Now()
	if wait := r.renew().Sub(start); wait > servingRetry(1)+time.Second {
		t.Errorf("first retry of a new failing state in %s, want %s", wait, servingRetry(1))
	}
	if got := errorLogs(); got != 2 {
		t.Errorf("%d error lines for two failing states, want 2", got)
	}
}

// The wait doubles from a second, up to five minutes.
func TestServingRetryBacksOff(t *testing.T) {
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{
		{0, time.Second},
		{1, time.Second},
		{2, 2 * time.Second},
		{5, 16 * time.Second},
		{9, 256 * time.Second},
		{10, 5 * time.Minute},
		{64, 5 * time.Minute},
		{1 << 20, 5 * time.Minute},
	} {
		if got := servingRetry(tc.failures); got != tc.want {
			t.Errorf("servingRetry(%d) = %s, want %s", tc.failures, got, tc.want)
		}
	}
}
