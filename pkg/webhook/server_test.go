package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/meshpilot/meshpilot/pkg/ca"
)

// fixedCert is a CertificateSource for tests that never handshake.
type fixedCert struct{}

func (fixedCert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return nil, errors.New("no certificate")
}

// startServer runs a server whose certificate for 127.0.0.1 comes from an
// in-memory mesh CA, as in the control plane, and returns it with that
// certificate, the CA's root and a stop function that waits for Run.
func startServer(t *testing.T, handlers map[string]http.Handler, metrics *Metrics, tweaks ...func(*ServerOptions)) (*Server, *ca.RotatingServingCert, []byte, func() error) {
	t.Helper()
	authority, err := ca.NewSelfSigned(ca.Options{})
	if err != nil {
		t.Fatal(err)
	}
	certs, err := ca.NewRotatingServingCert(ca.ServingCertOptions{
		Authority: authority, Names: []string{"127.0.0.1"}, Listener: "webhook", Logger: discardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := certs.Issue(); err != nil {
		t.Fatal(err)
	}
	opts := ServerOptions{Addr: "127.0.0.1:0", Handlers: handlers, Certs: certs, Logger: discardLogger(), Metrics: metrics}
	for _, tweak := range tweaks {
		tweak(&opts)
	}
	srv, err := NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { _ = stop() })
	return srv, certs, authority.RootPEM(), stop
}

// clientFor trusts only root.
func clientFor(root []byte) *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(root)
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots},
			DisableKeepAlives: true,
		},
	}
}

func TestServerServesHandlersOverTLS(t *testing.T) {
	metrics := NewMetrics(nil)
	inject := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "inject:"+r.URL.Path)
	})
	srv, _, root, _ := startServer(t, map[string]http.Handler{
		"/inject":   inject,
		"/validate": NewValidationHandler(ValidationOptions{Metrics: metrics, Logger: discardLogger()}),
	}, metrics)
	if !strings.HasPrefix(srv.Addr(), "127.0.0.1:") || strings.HasSuffix(srv.Addr(), ":0") {
		t.Fatalf("Addr() = %q, want the bound port", srv.Addr())
	}
	client := clientFor(root)
	base := "https://" + srv.Addr()

	body := reviewBody(t, reviewSpec{group: istioNetworkingGroup, version: "v1", kind: "DestinationRule", op: admissionv1.Create, object: brokenDR})
	resp, err := client.Post(base+"/validate", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&review); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if review.Response == nil || review.Response.Allowed {
		t.Fatalf("invalid DestinationRule not denied over TLS: %+v", review.Response)
	}

	for _, tc := range []struct {
		path, want string
		code       int
	}{
		{path: "/inject", want: "inject:/inject", code: http.StatusOK},
		{path: "/inject/cluster/k/net/n", want: "inject:/inject/cluster/k/net/n", code: http.StatusOK},
		{path: "/elsewhere", code: http.StatusNotFound},
	} {
		resp, err := client.Get(base + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || (tc.want != "" && string(got) != tc.want) {
			t.Errorf("GET %s = %d %q, want %d %q", tc.path, resp.StatusCode, got, tc.code, tc.want)
		}
	}
	if got := testutil.ToFloat64(metrics.Requests.WithLabelValues("/validate", "200")); got != 1 {
		t.Errorf("requests{/validate,200} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(metrics.Requests.WithLabelValues("/inject", "200")); got != 2 {
		t.Errorf("requests{/inject,200} = %v, want 2", got)
	}
}

func TestServerPicksUpRotatedCertificate(t *testing.T) {
	srv, certs, root, _ := startServer(t, map[string]http.Handler{"/validate": http.NotFoundHandler()}, NewMetrics(nil))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(root)
	served := func() *x509.Certificate {
		t.Helper()
		conn, err := tls.Dial("tcp", srv.Addr(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0]
	}
	before := served()
	if _, err := certs.Issue(); err != nil {
		t.Fatal(err)
	}
	after := served()
	if after.Equal(before) {
		t.Fatal("the server still presents the old certificate after rotation")
	}
	if cur, _ := certs.GetCertificate(nil); !cur.Leaf.Equal(after) {
		t.Fatal("the server presents a certificate other than the current one")
	}
}

func TestServerShutsDownGracefully(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		io.WriteString(w, "finished")
	})
	srv, _, root, stop := startServer(t, map[string]http.Handler{"/slow": slow}, NewMetrics(nil))
	client := clientFor(root)
	type result struct {
		body string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := client.Get("https://" + srv.Addr() + "/slow")
		if err != nil {
			got <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- result{string(b), err}
	}()
	<-entered
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// New connections are refused once shutdown has begun.
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", srv.Addr(), time.Second)
		if err != nil {
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("still accepting connections during shutdown")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) before the in-flight request finished", err)
	default:
	}
	close(release)
	if r := <-got; r.err != nil || r.body != "finished" {
		t.Fatalf("in-flight request = %q, %v; want it to finish", r.body, r.err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Run = %v, want nil after a clean shutdown", err)
	}
}

// TestServerWithoutGraceCutsRequestsShort: a negative ShutdownTimeout
// (--shutdown-grace=0) closes in-flight requests at once instead of
// waiting the default.
func TestServerWithoutGraceCutsRequestsShort(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	slow := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		close(entered)
		<-release
	})
	srv, _, root, stop := startServer(t, map[string]http.Handler{"/slow": slow}, NewMetrics(nil),
		func(o *ServerOptions) { o.ShutdownTimeout = -1 })
	failed := make(chan error, 1)
	go func() {
		resp, err := clientFor(root).Get("https://" + srv.Addr() + "/slow")
		if err == nil {
			resp.Body.Close()
		}
		failed <- err
	}()
	<-entered
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case err := <-stopped:
		if err == nil {
			t.Error("Run = nil with a request cut short, want the shutdown's error")
		}
	case <-time.After(defaultShutdownTimeout / 2):
		// Without a grace Run returns in milliseconds; half the default
		// tells "none" from "the default" with room for a slow machine.
		t.Fatal("Run waited for the in-flight request with no grace")
	}
	if err := <-failed; err == nil {
		t.Error("the in-flight request succeeded; want its connection closed")
	}
}

func TestNewServerErrors(t *testing.T) {
	var certs fixedCert
	ok := http.NotFoundHandler()
	cases := []struct {
		name string
		opts ServerOptions
		want string
	}{
		{name: "no certs", opts: ServerOptions{Handlers: map[string]http.Handler{"/v": ok}}, want: "Certs is required"},
		{name: "no handlers", opts: ServerOptions{Certs: certs}, want: "no handlers"},
		{name: "relative path", opts: ServerOptions{Certs: certs, Handlers: map[string]http.Handler{"v": ok}}, want: "must start with /"},
		{name: "root", opts: ServerOptions{Certs: certs, Handlers: map[string]http.Handler{"/": ok}}, want: "root path"},
		{name: "overlap", opts: ServerOptions{Certs: certs, Handlers: map[string]http.Handler{"/v": ok, "/v/": ok}}, want: "overlap"},
		{name: "nil handler", opts: ServerOptions{Certs: certs, Handlers: map[string]http.Handler{"/v": nil}}, want: "nil handler"},
		{name: "bad addr", opts: ServerOptions{Addr: "256.0.0.1:1", Certs: certs, Handlers: map[string]http.Handler{"/v": ok}}, want: "listen on"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewServer(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}
