package ca

import (
	"cmp"
	"context"
	"crypto/elliptic"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/meshpilot/meshpilot/internal/testlog"
)

// TestTokenReviewFailures: a TokenReview the API server cannot answer makes
// the caller retry; one it refuses the CA (no RBAC to create TokenReviews)
// fails every caller until the operator grants it, so the caller is told
// not to retry. Either is counted by its reason.
func TestTokenReviewFailures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		review   error
		code     codes.Code
		checkErr string
		logged   string // what the one error line says; none when empty
	}{
		{"API server unreachable", errors.New("dial tcp 10.96.0.1:443: connect: connection refused"), codes.Unavailable, "UNAVAILABLE_ERROR", ""},
		{"the CA may not create TokenReviews", apierrors.NewForbidden(
			schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}, "",
			errors.New(`User "system:serviceaccount:istio-system:meshpilot" cannot create resource "tokenreviews"`)),
			codes.FailedPrecondition, "RBAC_ERROR", `permission="create tokenreviews.authentication.k8s.io"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset()
			kube.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tc.review
			})
			reg := prometheus.NewRegistry()
			m := NewMetrics(reg)
			var logs testlog.Buffer
			srv, err := NewServer(ServerOptions{
				Authority:      mustSelfSigned(t, Options{}),
				Authenticators: []Authenticator{NewTokenAuthenticator(kube, TokenOptions{Logger: discard()})},
				Metrics:        m,
				Logger:         slog.New(slog.NewTextHandler(&logs, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			_, err = srv.CreateCertificate(withBearer("a-token"), &pb.IstioCertificateRequest{
				Csr: string(csrFor(t, ecKey(t, elliptic.P256()), nil)),
			})
			if got := status.Code(err); got != tc.code {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
			if got := testutil.ToFloat64(m.AuthnFailures); got != 1 {
				t.Errorf("authentication failures counted: %v, want 1", got)
			}
			if got := countedCheckErrors(t, reg, tc.checkErr); got != 1 {
				t.Errorf("meshpilot_ca_caller_check_err_count{error=%q} = %v, want 1", tc.checkErr, got)
			}
			lines := logLines(logs.String(), "ERROR")
			if tc.logged == "" && len(lines) != 0 || tc.logged != "" && (len(lines) != 1 || !strings.Contains(lines[0], tc.logged)) {
				t.Errorf("error lines %q, want %s", lines, cmp.Or(tc.logged, "none"))
			}
		})
	}
}

// TestForbiddenCheckLoggedOncePerPermission: a CA whose RBAC lacks a
// permission fails every call alike. The operator needs one error line
// naming the permission, repeated only as a reminder while it lasts, not
// one per call; each call is counted.
func TestForbiddenCheckLoggedOncePerPermission(t *testing.T) {
	ztunnelPod, appPod := impersonationPods()
	kube := fake.NewClientset(ztunnelPod, appPod)
	var getErr, listErr error
	failPodCalls(kube, func() error { return getErr }, func() error { return listErr })
	forbidden := func(verb string) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "",
			errors.New(`User "system:serviceaccount:istio-system:meshpilot" cannot `+verb+` resource "pods"`))
	}
	var logs testlog.Buffer
	reg := prometheus.NewRegistry()
	srv := impersonationServer(t, kube, NewMetrics(reg), slog.New(slog.NewTextHandler(&logs, nil)))
	clock := time.Now()
	srv.rbacLog.now = func() time.Time { return clock }

	calls := 0
	for _, step := range []struct {
		name          string
		later         time.Duration // the clock moves on by this before the step
		get, list     error
		calls         int
		newErrorLines []string // what each error line logged by this step says
	}{
		{"the CA may not get Pods", 0, forbidden("get"), nil, 3, []string{`permission="get pods" calls=1`}},
		{"nor list them", 0, nil, forbidden("list"), 3, []string{`permission="list pods" calls=1`}},
		{"get refused again, soon after", rbacLogInterval / 2, forbidden("get"), nil, 2, nil},
		// A reminder, with the calls refused since the first line.
		{"get still refused, an interval later", rbacLogInterval / 2, forbidden("get"), nil, 1,
			[]string{`permission="get pods" calls=5`}},
	} {
		clock = clock.Add(step.later)
		getErr, listErr = step.get, step.list
		before := strings.Count(logs.String(), "level=ERROR")
		for range step.calls {
			_, err := srv.CreateCertificate(context.Background(), impersonationRequest(t))
			if status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("%s: got %v, want FailedPrecondition", step.name, err)
			}
		}
		calls += step.calls
		lines := logLines(logs.String(), "ERROR")[before:]
		if len(lines) != len(step.newErrorLines) {
			t.Fatalf("%s: %d new error lines, want %d:\n%s", step.name, len(lines), len(step.newErrorLines), logs.String())
		}
		for i, want := range step.newErrorLines {
			if !strings.Contains(lines[i], want) {
				t.Errorf("%s: error line %q does not say %s", step.name, lines[i], want)
			}
		}
		if got := countedCheckErrors(t, reg, "RBAC_ERROR"); got != float64(calls) {
			t.Errorf("%s: RBAC_ERROR counted %v times, want %d", step.name, got, calls)
		}
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 0 {
		t.Errorf("%d warnings besides the error lines, want none:\n%s", n, logs.String())
	}
}

// logLines are the lines of a text-handler log at level (ERROR, WARN).
func logLines(log, level string) []string {
	var out []string
	for l := range strings.Lines(log) {
		if strings.Contains(l, "level="+level) {
			out = append(out, l)
		}
	}
	return out
}

// TestAPIServerOutageLoggedOncePerInterval: while the API server cannot
// answer, every CSR of a connect storm fails alike and its caller retries.
// Each call is counted, but the log names the outage once per interval,
// with the calls it stands for, not once per call.
func TestAPIServerOutageLoggedOncePerInterval(t *testing.T) {
	const storm = 2000
	unreachable := errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
	for _, tc := range []struct {
		name  string
		check string // what the line says could not be checked
		// server is a CA whose check of the caller finds the API server
		// unreachable, and a request for it.
		server func(t *testing.T, m *Metrics, log *slog.Logger) (*Server, *pb.IstioCertificateRequest)
	}{
		{"TokenReview", "credentials", func(t *testing.T, m *Metrics, log *slog.Logger) (*Server, *pb.IstioCertificateRequest) {
			kube := fake.NewClientset()
			kube.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, unreachable
			})
			srv, err := NewServer(ServerOptions{
				Authority:      mustSelfSigned(t, Options{}),
				Authenticators: []Authenticator{NewTokenAuthenticator(kube, TokenOptions{Logger: discard()})},
				Metrics:        m,
				Logger:         log,
			})
			if err != nil {
				t.Fatal(err)
			}
			return srv, &pb.IstioCertificateRequest{Csr: string(csrFor(t, ecKey(t, elliptic.P256()), nil))}
		}},
		{"the Pod lookup of an impersonation", "impersonation", func(t *testing.T, m *Metrics, log *slog.Logger) (*Server, *pb.IstioCertificateRequest) {
			ztunnelPod, appPod := impersonationPods()
			kube := fake.NewClientset(ztunnelPod, appPod)
			failPodCalls(kube, func() error { return unreachable }, func() error { return nil })
			return impersonationServer(t, kube, m, log), impersonationRequest(t)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			var logs testlog.Buffer
			srv, req := tc.server(t, NewMetrics(reg), slog.New(slog.NewTextHandler(&logs, nil)))
			clock := time.Now()
			srv.unavailableLog.now = func() time.Time { return clock }
			calls := 0
			call := func() {
				t.Helper()
				_, err := srv.CreateCertificate(withBearer("a-token"), req)
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("got %v, want Unavailable", err)
				}
				calls++
			}
			for _, step := range []struct {
				name      string
				later     time.Duration // the clock moves on by this before the step
				calls     int
				wantLines []string // what each warning logged by this step says
			}{
				{"a connect storm", 0, storm, []string{`calls=1 `}},
				{"more calls, soon after", unavailableLogInterval / 2, storm, nil},
				// A reminder, with the calls since the first line.
				{"the outage goes on", unavailableLogInterval / 2, 1, []string{`calls=` + strconv.Itoa(2*storm) + ` `}},
			} {
				clock = clock.Add(step.later)
				before := len(logLines(logs.String(), "WARN"))
				for range step.calls {
					call()
				}
				lines := logLines(logs.String(), "WARN")[before:]
				if len(lines) != len(step.wantLines) {
					t.Fatalf("%s: %d new warnings, want %d; the first ones:\n%s", step.name, len(lines), len(step.wantLines),
						strings.Join(lines[:min(len(lines), 3)], ""))
				}
				for i, want := range step.wantLines {
					for _, says := range []string{want, "check=" + tc.check, "connection refused"} {
						if !strings.Contains(lines[i], says) {
							t.Errorf("%s: warning %q does not say %s", step.name, lines[i], says)
						}
					}
				}
				if got := countedCheckErrors(t, reg, "UNAVAILABLE_ERROR"); got != float64(calls) {
					t.Errorf("%s: UNAVAILABLE_ERROR counted %v times, want %d", step.name, got, calls)
				}
			}
			if lines := logLines(logs.String(), "ERROR"); len(lines) != 0 {
				t.Errorf("error lines for an outage, want warnings only: %q", lines)
			}
		})
	}
}
