package nodeproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/testcerts"
	"github.com/meshpilot/meshpilot/pkg/caclient"
)

// TestCertStoreAwait follows a connection that comes before its
// workload's certificate, as after a node proxy's restart: it waits for
// the certificate while the identity is wanted, and no longer.
func TestCertStoreAwait(t *testing.T) {
	const id = "spiffe://cluster.local/ns/a/sa/app"
	cert := testCertificate(t, id)
	for _, tc := range []struct {
		name     string
		wanted   bool
		meantime func(s *certStore)
		ctx      func() (context.Context, context.CancelFunc)
		wantErr  bool
	}{
		{name: "the certificate comes while the connection waits", wanted: true,
			meantime: func(s *certStore) { s.store(id, cert) }},
		{name: "an identity not wanted fails at once", wanted: false, wantErr: true},
		{name: "the workload leaves while the connection waits", wanted: true, wantErr: true,
			meantime: func(s *certStore) { s.want(nil) }},
		{name: "the connection gives up", wanted: true, wantErr: true,
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 50*time.Millisecond)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newCertStore(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if tc.wanted {
				s.want([]string{id})
			}
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tc.ctx != nil {
				ctx, cancel = tc.ctx()
			}
			defer cancel()
			type result struct {
				c   *tls.Certificate
				err error
			}
			done := make(chan result, 1)
			go func() {
				c, err := s.await(ctx, id)
				done <- result{c, err}
			}()
			if tc.meantime != nil {
				// A wanted identity with no certificate yet is waited for,
				// not refused.
				select {
				case r := <-done:
					t.Fatalf("await = %v, %v before anything happened; want it to wait", r.c, r.err)
				case <-time.After(20 * time.Millisecond):
				}
				tc.meantime(s)
			}
			select {
			case r := <-done:
				if tc.wantErr {
					if !errors.Is(r.err, errNoCertificate) {
						t.Fatalf("await = %v, %v; want errNoCertificate", r.c, r.err)
					}
					return
				}
				if r.err != nil || r.c != &s.certs[id].TLS {
					t.Fatalf("await = %v, %v; want the stored certificate", r.c, r.err)
				}
			case <-time.After(certWait - time.Second):
				t.Fatal("await still waiting")
			}
		})
	}
}

func testCertificate(t *testing.T, id string) *caclient.Certificate {
	t.Helper()
	leaf := testcerts.NewCA(t, "cluster.local").Issue(t, id)
	return &caclient.Certificate{Identity: id, TLS: leaf, Leaf: leaf.Leaf}
}
