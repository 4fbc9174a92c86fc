package bootstrap

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/kubetest"
)

// TestShutdownBoundedByGrace: SIGTERM drains for --shutdown-grace, then the
// process exits, whatever a client holds open. A client that sent half a
// request and waits, on the debug port or the webhooks', must neither keep
// Run going past the grace (the webhook server used to start its own drain,
// of 5 s, only once the grace was over) nor keep its connection, and the
// request's goroutine, once Run has returned (the debug servers were left
// open when their drain timed out).
func TestShutdownBoundedByGrace(t *testing.T) {
	const grace = time.Second
	env := kubetest.Start(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	writeKubeconfig(t, env.Config, kubeconfig)
	create(t, env.Kube, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}})

	cases := []struct {
		name string
		// hold opens a connection to srv and leaves a request in it
		// unfinished.
		hold func(t *testing.T, srv *Server) net.Conn
	}{
		{"debug port", func(t *testing.T, srv *Server) net.Conn {
			conn, err := net.Dial("tcp", srv.HTTPAddr().String())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Write([]byte("GET /ready HTTP/1.1\r\nHost: x\r\n")); err != nil {
				t.Fatal(err)
			}
			return conn
		}},
		{"webhook port", func(t *testing.T, srv *Server) net.Conn {
			var conn *tls.Conn
			// Handshakes fail until the mesh CA has issued the
			// webhooks' certificate.
			waitUntil(t, "the webhooks' certificate", func() (err error) {
				conn, err = tls.Dial("tcp", srv.WebhookAddr(), &tls.Config{InsecureSkipVerify: true})
				return err
			})
			if _, err := conn.Write([]byte("POST /validate HTTP/1.1\r\nHost: x\r\n")); err != nil {
				t.Fatal(err)
			}
			return conn
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := localOptions(t)
			o.Kubeconfig = kubeconfig
			o.LeaderElection.Enabled = false
			o.ShutdownGrace = grace
			srv, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- srv.Run(ctx) }()
			waitUntil(t, "ready", func() error {
				if reason := srv.notReadyReason(); reason != "" {
					return errors.New(reason)
				}
				return nil
			})

			conn := tc.hold(t, srv)
			defer conn.Close()
			time.Sleep(100 * time.Millisecond) // the server has read what was sent
			start := time.Now()
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
			case <-time.After(grace + 10*time.Second):
				t.Fatal("Run did not return")
			}
			// Slack for a loaded machine, well below the webhooks' old
			// second drain of 5 s.
			if took := time.Since(start); took > grace+2*time.Second {
				t.Errorf("Run returned %v after the cancel, with a grace of %v", took.Round(time.Millisecond), grace)
			}
			// The server has closed the connection: a read ends at once,
			// not at the deadline.
			_ = conn.SetReadDeadline(time.Now().Add(time.Second))
			_, err = conn.Read(make([]byte, 1024))
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Error("the half-sent request's connection is still open after Run returned")
			}
		})
	}
}
