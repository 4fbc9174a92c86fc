package caclient

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"

	"github.com/meshpilot/meshpilot/pkg/ca"
)

// The token is sent over TLS, and never over a plaintext connection: the
// call fails before anything reaches the server.
func TestTokenNeedsTransportSecurity(t *testing.T) {
	authority, err := ca.NewSelfSigned(ca.Options{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	serving, err := authority.ServingCertificate([]string{"localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name               string
		server, client     credentials.TransportCredentials
		wantAuthorizations []string
	}{
		{"tls", credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{*serving}}),
			credentials.NewTLS(&tls.Config{RootCAs: authority.RootPool(), ServerName: "localhost"}),
			[]string{"Bearer secret-token"}},
		{"plaintext", insecure.NewCredentials(), insecure.NewCredentials(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recordingCA{}
			g := grpc.NewServer(grpc.Creds(tc.server))
			pb.RegisterIstioCertificateServiceServer(g, rec)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = g.Serve(lis) }()
			t.Cleanup(g.Stop)
			conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(tc.client))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })

			client := New(Options{Conn: conn, Token: func(context.Context) (string, error) { return "secret-token", nil }})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = client.Certificate(ctx, Request{Identity: webID})
			if err == nil {
				t.Fatal("the recording CA answered no certificate, yet the call succeeded")
			}
			got := rec.authorizations()
			if !slices.Equal(got, tc.wantAuthorizations) {
				t.Errorf("the server received authorization %q, want %q (call: %v)", got, tc.wantAuthorizations, err)
			}
			if tc.wantAuthorizations == nil && status.Code(errorsUnwrap(err)) != codes.Unauthenticated {
				t.Errorf("plaintext call: %v, want grpc-go's Unauthenticated refusal", err)
			}
		})
	}
}

// recordingCA records the authorization metadata of every call, and
// refuses it.
type recordingCA struct {
	pb.UnimplementedIstioCertificateServiceServer
	mu   sync.Mutex
	seen []string
}

func (r *recordingCA) CreateCertificate(ctx context.Context, _ *pb.IstioCertificateRequest) (*pb.IstioCertificateResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	r.mu.Lock()
	r.seen = append(r.seen, md.Get("authorization")...)
	r.mu.Unlock()
	return nil, status.Error(codes.Unavailable, "recording only")
}

func (r *recordingCA) authorizations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}
